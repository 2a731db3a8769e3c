//! The key-value side of [`EtcdStore`]: get, put, delete, scan, transactions, revision and
//! compaction.

use std::future::Future;
use std::time::Duration;

use ccattler_core::key::validate_prefix;
use ccattler_core::{Fact, Key, LeaseId, Revision, Scan, StoreError, Txn, TxnResponse, Value};
use etcd_client::{
    Compare as EtcdCompare, CompareOp, DeleteOptions, GetOptions, PutOptions, ResponseHeader,
    Txn as EtcdTxn, TxnOp, TxnOpResponse,
};

use super::EtcdStore;
use super::convert::{self, revision};
use super::error::{Kind, kind_of, timed};

/// Keys per page of a scan.
const SCAN_PAGE: i64 = 5000;

/// Room for keys, compares and framing in the one-transaction idempotent put, which sends the
/// value twice (once to compare, once to write).
const PUT_TXN_OVERHEAD: usize = 3 * ccattler_core::key::MAX_KEY_LEN + 1024;

/// The revision in a response header.
pub(super) fn header_revision(header: Option<&ResponseHeader>) -> Result<Revision, StoreError> {
    header
        .map(|h| revision(h.revision()))
        .ok_or_else(|| StoreError::unavailable("etcd answered without a response header"))
}

impl EtcdStore {
    /// Runs `call` up to [`retries`](super::EtcdConfig::retries) times while it fails to reach
    /// etcd (never when etcd rejected the request, nor after a timeout).
    pub(super) async fn retrying<T, F, Fut>(&self, mut call: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let attempts = self.shared.config.retries.max(1);
        let mut attempt = 1;
        loop {
            match call().await {
                Err(e @ StoreError::Unavailable { .. })
                    if attempt < attempts && kind_of(&e).is_none() =>
                {
                    tracing::debug!(error = %e, attempt, "etcd request failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Maps etcd's rejections that name a lease or a too large request to the precise errors.
    pub(super) fn rejected(
        &self,
        error: StoreError,
        lease: Option<LeaseId>,
        large: Option<(&Key, usize, usize)>,
    ) -> StoreError {
        match (kind_of(&error), lease, large) {
            (Some(Kind::LeaseNotFound), Some(lease), _) => StoreError::LeaseNotFound(lease),
            (Some(Kind::TooLarge), _, Some((key, size, limit))) => StoreError::ValueTooLarge {
                key: key.clone(),
                size,
                limit,
            },
            _ => error,
        }
    }

    pub(super) async fn get_fact(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        let k = self.prefix.key(key);
        let t = self.timeout();
        let response = self
            .retrying(|| async {
                let mut kv = self.shared.kv.clone();
                timed(t, "get", kv.get(k.clone(), None)).await
            })
            .await?;
        Ok(response.kvs().first().and_then(|kv| self.prefix.fact(kv)))
    }

    /// The idempotent put: writes only when the value or the lease differs, in one etcd
    /// transaction (two steps for values too large to send twice).
    pub(super) async fn put_idempotent(
        &self,
        key: &Key,
        value: Value,
        lease: Option<LeaseId>,
    ) -> Result<Revision, StoreError> {
        let limits = self.shared.limits;
        limits.check_value(key, value.len())?;
        let k = self.prefix.key(key);
        let l = lease.map_or(0, |l| l.0);
        let one_txn = 2 * value.len() + PUT_TXN_OVERHEAD <= self.shared.config.max_request_bytes;
        let result = if one_txn {
            self.retrying(|| self.put_in_one_txn(&k, &value, l)).await
        } else {
            self.retrying(|| self.put_in_two_steps(&k, &value, l)).await
        };
        result
            .map_err(|e| self.rejected(e, lease, Some((key, value.len(), limits.max_value_bytes))))
    }

    async fn put_in_one_txn(
        &self,
        k: &[u8],
        value: &Value,
        l: i64,
    ) -> Result<Revision, StoreError> {
        let txn = EtcdTxn::new()
            .when(vec![
                EtcdCompare::value(k.to_vec(), CompareOp::Equal, value.to_vec()),
                EtcdCompare::lease(k.to_vec(), CompareOp::Equal, l),
            ])
            .and_then(vec![TxnOp::get(k.to_vec(), None)])
            .or_else(vec![TxnOp::put(
                k.to_vec(),
                value.to_vec(),
                Some(PutOptions::new().with_lease(l)),
            )]);
        let mut kv = self.shared.kv.clone();
        let response = timed(self.timeout(), "put", kv.txn(txn)).await?;
        if !response.succeeded() {
            return header_revision(response.header());
        }
        for op in response.op_responses() {
            if let TxnOpResponse::Get(get) = op
                && let Some(kv) = get.kvs().first()
            {
                return Ok(revision(kv.mod_revision()));
            }
        }
        Err(StoreError::unavailable(
            "etcd answered an unchanged put without the stored key",
        ))
    }

    async fn put_in_two_steps(
        &self,
        k: &[u8],
        value: &Value,
        l: i64,
    ) -> Result<Revision, StoreError> {
        let t = self.timeout();
        loop {
            let mut kv = self.shared.kv.clone();
            let current = timed(t, "put (read)", kv.get(k.to_vec(), None)).await?;
            let seen = match current.kvs().first() {
                Some(kv) if kv.value() == &value[..] && kv.lease() == l => {
                    return Ok(revision(kv.mod_revision()));
                }
                Some(kv) => kv.mod_revision(),
                None => 0,
            };
            let txn = EtcdTxn::new()
                .when(vec![EtcdCompare::mod_revision(
                    k.to_vec(),
                    CompareOp::Equal,
                    seen,
                )])
                .and_then(vec![TxnOp::put(
                    k.to_vec(),
                    value.to_vec(),
                    Some(PutOptions::new().with_lease(l)),
                )]);
            let response = timed(t, "put", kv.txn(txn)).await?;
            if response.succeeded() {
                return header_revision(response.header());
            }
        }
    }

    pub(super) async fn delete_key(&self, key: &Key) -> Result<Option<Fact>, StoreError> {
        let mut kv = self.shared.kv.clone();
        let options = DeleteOptions::new().with_prev_key();
        let call = kv.delete(self.prefix.key(key), Some(options));
        let response = timed(self.timeout(), "delete", call).await?;
        Ok(response
            .prev_kvs()
            .first()
            .and_then(|kv| self.prefix.fact(kv)))
    }

    /// A scan at one revision, in pages of [`SCAN_PAGE`] keys.
    pub(super) async fn scan_prefix(&self, prefix: &str) -> Result<Scan, StoreError> {
        validate_prefix(prefix)?;
        let (start, end) = self.prefix.range(prefix);
        let t = self.timeout();
        'scan: loop {
            let mut from = start.clone();
            let mut at = 0;
            let mut facts = Vec::new();
            loop {
                let mut options = GetOptions::new()
                    .with_range(end.clone())
                    .with_limit(SCAN_PAGE);
                if at > 0 {
                    options = options.with_revision(at);
                }
                let page = self
                    .retrying(|| async {
                        let mut kv = self.shared.kv.clone();
                        let options = options.clone();
                        timed(t, "scan", kv.get(from.clone(), Some(options))).await
                    })
                    .await;
                let page = match page {
                    // Compacted between two pages: read them all again.
                    Err(e) if kind_of(&e) == Some(Kind::Compacted) => continue 'scan,
                    other => other?,
                };
                if at == 0 {
                    at = page.header().map_or(0, |h| h.revision());
                }
                facts.extend(page.kvs().iter().filter_map(|kv| self.prefix.fact(kv)));
                match page.kvs().last() {
                    Some(last) if page.more() => {
                        from = last.key().to_vec();
                        from.push(0);
                    }
                    _ => {
                        return Ok(Scan {
                            revision: revision(at),
                            facts,
                        });
                    }
                }
            }
        }
    }

    pub(super) async fn commit(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        let limits = self.shared.limits;
        limits.check_txn(&txn)?;
        let (largest, size) = convert::request_size(&txn);
        let ops = txn.compares.len() + txn.then.len() + txn.otherwise.len();
        let size = size + ops * (self.prefix.0.len() + 16);
        let max = self.shared.config.max_request_bytes;
        let large = largest.map(|key| (key, size, max));
        if let Some((key, size, limit)) = large
            && size > limit
        {
            return Err(StoreError::ValueTooLarge {
                key: key.clone(),
                size,
                limit,
            });
        }
        let mut kv = self.shared.kv.clone();
        let call = kv.txn(convert::txn(&self.prefix, &txn));
        let response =
            timed(self.timeout(), "transaction", call)
                .await
                .map_err(|e| match kind_of(&e) {
                    // The server runs with a lower limit than configured; it does not say which, so
                    // the error names etcd's default.
                    Some(Kind::TooManyOps) => StoreError::TooManyOps {
                        what: "operations in one branch",
                        count: ops,
                        limit: super::ETCD_MAX_TXN_OPS.min(limits.max_txn_ops),
                    },
                    _ => self.rejected(e, convert::first_lease(&txn), large),
                })?;
        Ok(TxnResponse {
            succeeded: response.succeeded(),
            revision: header_revision(response.header())?,
        })
    }

    pub(super) async fn current_revision(&self) -> Result<Revision, StoreError> {
        let t = self.timeout();
        let response = self
            .retrying(|| async {
                let mut kv = self.shared.kv.clone();
                let options = GetOptions::new().with_count_only();
                timed(t, "revision", kv.get(vec![0], Some(options))).await
            })
            .await?;
        header_revision(response.header())
    }

    /// Compacts etcd at `revision - 1`, so that watches from `revision` still get previous
    /// values (see the type's docs).
    pub(super) async fn compact_history(&self, requested: Revision) -> Result<(), StoreError> {
        let current = self.current_revision().await?;
        if requested > current {
            return Err(StoreError::FutureRevision { requested, current });
        }
        if requested.0 <= 1 {
            return Ok(());
        }
        let mut kv = self.shared.kv.clone();
        let call = kv.compact(convert::raw_revision(requested) - 1, None);
        match timed(self.timeout(), "compaction", call).await {
            Ok(_) => Ok(()),
            Err(e) if kind_of(&e) == Some(Kind::Compacted) => Err(StoreError::Compacted {
                requested,
                earliest: self.earliest_revision().await?,
            }),
            Err(e) if kind_of(&e) == Some(Kind::FutureRevision) => {
                Err(StoreError::FutureRevision {
                    requested,
                    current: self.current_revision().await?,
                })
            }
            Err(e) => Err(e),
        }
    }
}
