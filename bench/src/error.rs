//! The bench's error: any failure, with a message. The bench reports it and
//! exits non-zero; nothing recovers from it, so a boxed error is enough.

/// Any error of the bench, of keyholder or of redis-rs.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A result of the bench.
pub(crate) type Res<T> = Result<T, BoxError>;

/// An error with this message.
pub(crate) fn err(msg: impl Into<String>) -> BoxError {
    msg.into().into()
}
