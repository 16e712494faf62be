//! Where a permit-expirable semaphore lives in Redis (the count at the
//! name, the held-permits set beside it, the channel) and what its permits
//! are called: ids of 16 random bytes, shown as Java shows them. Kept apart
//! from the handle so that the scripts, the guard and the renewal, which
//! all need them, import this file and not the handle that imports them.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};

/// A permit-expirable semaphore's keys and channel.
#[derive(Debug)]
pub(crate) struct Keys {
    pub(crate) name: Arc<str>,
    pub(crate) timeouts: Arc<str>,
    pub(crate) channel: Arc<str>,
}

/// A permit's id: 16 random bytes, written to Redis raw and shown as 32
/// lowercase hex digits, as Java's permit ids are.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId([u8; 16]);

impl PermitId {
    /// A new random id.
    pub(crate) fn random() -> PermitId {
        PermitId(uuid::Uuid::new_v4().into_bytes())
    }

    /// The 16 bytes stored in Redis.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl FromStr for PermitId {
    type Err = Error;

    /// Parses Java's form: 32 hex digits (either case).
    fn from_str(text: &str) -> Result<PermitId> {
        let bad = || Error::invalid_argument(format!("permit id {text:?} is not 32 hex digits"));
        if text.len() != 32 || !text.is_ascii() {
            return Err(bad());
        }
        let mut bytes = [0u8; 16];
        for (at, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * at..2 * at + 2], 16).map_err(|_| bad())?;
        }
        Ok(PermitId(bytes))
    }
}
