//! [`DynRuntime`], the object-safe form of [`Runtime`], and `Runtime` for `Arc<dyn DynRuntime>`.
//!
//! A runtime is picked at run time the way the [store example](super::store) picks a store:
//! each arm of a `match` on the configured name coerces its runtime (`SimulatorRuntime`,
//! `ProcessRuntime`... of crate `ccattler-runtime`) to `Arc<dyn DynRuntime>`.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_core::future::BoxFuture;

use crate::{
    ExecOutput, FileSpec, InstanceSpec, InstanceStats, ObservedInstance, Runtime, RuntimeError,
};

/// The object-safe form of [`Runtime`]: the same operations, returning boxed futures, so that
/// `dyn DynRuntime` exists and a runtime can be chosen at run time.
///
/// Every [`Runtime`] implements it (blanket impl); nothing else needs to. Hold one as
/// `Arc<dyn DynRuntime>`, which implements [`Runtime`]. See the [module docs](crate::dynamic)
/// for when to prefer generics.
///
/// # Guarantees
///
/// Each `dyn_*` method is the [`Runtime`] method of the same name, unchanged, including
/// [`Runtime::network_probe`]: a runtime that answers probes itself (the simulator) still does
/// behind `dyn`, and one that keeps the default still answers `None`.
///
/// # Caveats
///
/// Call the [`Runtime`] names on `Arc<dyn DynRuntime>`; the `dyn_` prefix only keeps these
/// methods from clashing with them when both traits are in scope. `NodeAgent::new` (crate
/// `ccattler-runtime`) takes an `Arc<R>`, so there the dyn form is `Arc<Arc<dyn DynRuntime>>`:
/// one more pointer to follow per call.
pub trait DynRuntime: Send + Sync + 'static {
    /// [`Runtime::ensure_running`], boxed.
    fn dyn_ensure_running<'a>(
        &'a self,
        spec: &'a InstanceSpec,
    ) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// [`Runtime::ensure_stopped`], boxed.
    fn dyn_ensure_stopped<'a>(
        &'a self,
        id: &'a str,
        grace: Duration,
    ) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// [`Runtime::remove`], boxed.
    fn dyn_remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// [`Runtime::observe`], boxed.
    fn dyn_observe(&self) -> BoxFuture<'_, Result<Vec<ObservedInstance>, RuntimeError>>;

    /// [`Runtime::observe_some`], boxed.
    fn dyn_observe_some<'a>(
        &'a self,
        ids: &'a BTreeSet<String>,
    ) -> BoxFuture<'a, Result<Vec<ObservedInstance>, RuntimeError>>;

    /// [`Runtime::stats`], boxed.
    fn dyn_stats<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<InstanceStats, RuntimeError>>;

    /// [`Runtime::logs`], boxed.
    fn dyn_logs<'a>(
        &'a self,
        id: &'a str,
        lines: usize,
    ) -> BoxFuture<'a, Result<String, RuntimeError>>;

    /// [`Runtime::exec`], boxed.
    fn dyn_exec<'a>(
        &'a self,
        id: &'a str,
        command: &'a [String],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ExecOutput, RuntimeError>>;

    /// [`Runtime::update_files`], boxed: the runtime's own, or the default
    /// [`RuntimeError::Unsupported`].
    fn dyn_update_files<'a>(
        &'a self,
        id: &'a str,
        files: &'a [FileSpec],
    ) -> BoxFuture<'a, Result<(), RuntimeError>>;

    /// [`Runtime::network_probe`], boxed: the runtime's own answer, or the default `None`.
    fn dyn_network_probe<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Option<Result<(), String>>>;

    /// The runtime's type name, for `Debug` output and logs.
    ///
    /// # Caveats
    ///
    /// From [`std::any::type_name`]: meant for people, not guaranteed stable across compiler
    /// versions; do not match on it.
    fn dyn_type_name(&self) -> &'static str;
}

impl<R: Runtime> DynRuntime for R {
    fn dyn_ensure_running<'a>(
        &'a self,
        spec: &'a InstanceSpec,
    ) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(Runtime::ensure_running(self, spec))
    }

    fn dyn_ensure_stopped<'a>(
        &'a self,
        id: &'a str,
        grace: Duration,
    ) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(Runtime::ensure_stopped(self, id, grace))
    }

    fn dyn_remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(Runtime::remove(self, id))
    }

    fn dyn_observe(&self) -> BoxFuture<'_, Result<Vec<ObservedInstance>, RuntimeError>> {
        Box::pin(Runtime::observe(self))
    }

    fn dyn_observe_some<'a>(
        &'a self,
        ids: &'a BTreeSet<String>,
    ) -> BoxFuture<'a, Result<Vec<ObservedInstance>, RuntimeError>> {
        Box::pin(Runtime::observe_some(self, ids))
    }

    fn dyn_stats<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<InstanceStats, RuntimeError>> {
        Box::pin(Runtime::stats(self, id))
    }

    fn dyn_logs<'a>(
        &'a self,
        id: &'a str,
        lines: usize,
    ) -> BoxFuture<'a, Result<String, RuntimeError>> {
        Box::pin(Runtime::logs(self, id, lines))
    }

    fn dyn_exec<'a>(
        &'a self,
        id: &'a str,
        command: &'a [String],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ExecOutput, RuntimeError>> {
        Box::pin(Runtime::exec(self, id, command, timeout))
    }

    fn dyn_update_files<'a>(
        &'a self,
        id: &'a str,
        files: &'a [FileSpec],
    ) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(Runtime::update_files(self, id, files))
    }

    fn dyn_network_probe<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Option<Result<(), String>>> {
        Box::pin(Runtime::network_probe(self, id))
    }

    fn dyn_type_name(&self) -> &'static str {
        std::any::type_name::<R>()
    }
}

/// A runtime chosen at run time is a [`Runtime`]: every method, [`Runtime::network_probe`]
/// and [`Runtime::update_files`] included, forwards to the backend's own through [`DynRuntime`].
///
/// Each future is the backend's, boxed once by [`DynRuntime`] and awaited inside an `async fn`
/// here (no second allocation).
impl Runtime for Arc<dyn DynRuntime> {
    async fn ensure_running(&self, spec: &InstanceSpec) -> Result<(), RuntimeError> {
        (**self).dyn_ensure_running(spec).await
    }

    async fn ensure_stopped(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        (**self).dyn_ensure_stopped(id, grace).await
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        (**self).dyn_remove(id).await
    }

    async fn observe(&self) -> Result<Vec<ObservedInstance>, RuntimeError> {
        (**self).dyn_observe().await
    }

    async fn observe_some(
        &self,
        ids: &BTreeSet<String>,
    ) -> Result<Vec<ObservedInstance>, RuntimeError> {
        (**self).dyn_observe_some(ids).await
    }

    async fn stats(&self, id: &str) -> Result<InstanceStats, RuntimeError> {
        (**self).dyn_stats(id).await
    }

    async fn logs(&self, id: &str, lines: usize) -> Result<String, RuntimeError> {
        (**self).dyn_logs(id, lines).await
    }

    async fn exec(
        &self,
        id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        (**self).dyn_exec(id, command, timeout).await
    }

    async fn update_files(&self, id: &str, files: &[FileSpec]) -> Result<(), RuntimeError> {
        (**self).dyn_update_files(id, files).await
    }

    async fn network_probe(&self, id: &str) -> Option<Result<(), String>> {
        (**self).dyn_network_probe(id).await
    }
}

/// Names the backend (see [`DynRuntime::dyn_type_name`]).
impl fmt::Debug for dyn DynRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DynRuntime")
            .field(&self.dyn_type_name())
            .finish()
    }
}
