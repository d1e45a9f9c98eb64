//! What the server records for its operator: a line a request, the refusals, and the metrics.

pub(crate) mod metrics;
pub(crate) mod refusal_log;
pub(crate) mod request_log;
