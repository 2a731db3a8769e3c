//! Leader election: who may commit, and the fencing compares that prove it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::{Compare, StoreError};

/// Decides which of several runner replicas is active.
///
/// # Guarantees an implementation must keep
///
/// - At most one replica holds a [`Leadership`] whose fences hold at any revision.
/// - The fences are compares that fail once leadership has passed to someone else, so a deposed
///   leader that wakes up late cannot commit: the runner adds them to every transaction.
pub trait LeaderElection: Send + Sync + 'static {
    /// Waits until this replica leads.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] the election cannot recover from by waiting (retryable store errors are
    /// retried inside).
    fn campaign(&self) -> impl Future<Output = Result<Leadership, StoreError>> + Send;
}

/// Proof of leadership: fencing compares, and a signal for when it ends.
///
/// Dropping it resigns (implementations release their lease so another replica takes over fast).
pub struct Leadership {
    fences: Vec<Compare>,
    lost: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    _guard: Option<Box<dyn Send>>,
}

impl Leadership {
    /// Leadership with `fences` that ends when `lost` completes.
    pub fn new(fences: Vec<Compare>, lost: impl Future<Output = ()> + Send + 'static) -> Self {
        Leadership {
            fences,
            lost: Some(Box::pin(lost)),
            _guard: None,
        }
    }

    /// Leadership that never ends and needs no fences (a single replica).
    pub fn unconditional() -> Self {
        Leadership::new(Vec::new(), std::future::pending())
    }

    /// Keeps `guard` alive as long as the leadership; its `Drop` is where an implementation
    /// resigns.
    #[must_use]
    pub fn with_guard(mut self, guard: impl Send + 'static) -> Self {
        self._guard = Some(Box::new(guard));
        self
    }

    /// The compares every commit of the leader must carry.
    pub fn fences(&self) -> &[Compare] {
        &self.fences
    }

    /// Completes when leadership has ended (lease lost, key taken over). Completes at once on
    /// every call after the first completion.
    pub async fn lost(&mut self) {
        if let Some(lost) = self.lost.as_mut() {
            lost.await;
            self.lost = None;
        }
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("fences", &self.fences)
            .field("lost", &self.lost.is_none())
            .finish()
    }
}

/// No election: this replica always leads, with no fences. For a single runner.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoElection;

impl LeaderElection for NoElection {
    async fn campaign(&self) -> Result<Leadership, StoreError> {
        Ok(Leadership::unconditional())
    }
}
