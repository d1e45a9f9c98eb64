//! Why the store did not answer an operator's look-up or change of one caller's counter
//! (`/counters`, `/quota`). A decision never fails this way: a store that does not answer a
//! decision is the bound's `on-store-error` to settle.

/// Why the store did not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No connection to the store is open: it is still being made, or was lost and is being made
    /// again.
    #[error("the store is not connected")]
    NotConnected,
    /// The decision script got no answer (the store failed or did not answer in time; the log
    /// says which).
    #[error("the store did not answer")]
    NoAnswer,
    /// The store answered with an error, or the connection failed during the call.
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
}

impl StoreError {
    /// Whether the store was out of reach (not connected, no answer, a connection refused,
    /// dropped or timed out), rather than a store that answered with an error.
    pub fn unreachable(&self) -> bool {
        match self {
            StoreError::NotConnected | StoreError::NoAnswer => true,
            StoreError::Redis(e) => {
                e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
            }
        }
    }
}
