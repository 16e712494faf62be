//! Who holds a lock: the owner id `<client-uuid>:<thread-id>`, or an
//! [`OwnerToken`].
//!
//! Redisson identifies a holder by its client's UUID and the Java thread id.
//! Rust's `ThreadId::as_u64` is unstable and OS thread ids are reused, so each
//! thread takes a number from a process-wide counter the first time it touches
//! a lock. That counter is the crate's only global state: an identity source,
//! not client state.
//!
//! A hold owned by a token instead of a thread keeps the same shape,
//! `<uuid>:<number>`, so that Redisson sees an ordinary holder; its number
//! comes from a range no thread id reaches (`TOKEN_NUMBERS`, from 2^62: the
//! counter would have to count 2^62 threads first), chosen at random, so
//! that it can never name a thread of any client and two tokens of one
//! client practically never meet.

use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

static NEXT_THREAD_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_ID: u64 = NEXT_THREAD_ID.fetch_add(1, Ordering::Relaxed);
}

/// The calling thread's keyholder thread id: unique within the process,
/// never reused, never 0.
pub(crate) fn current_thread_id() -> u64 {
    THREAD_ID.with(|id| *id)
}

/// A number from the thread-id sequence that no thread will ever have: the
/// owner id of a hold that belongs to no thread (one run of a run-once job),
/// so that no thread can re-enter it.
pub(crate) fn unique_owner_number() -> u64 {
    NEXT_THREAD_ID.fetch_add(1, Ordering::Relaxed)
}

/// The hash field that identifies `thread_id` of the client `client_id`.
pub(crate) fn owner_id(client_id: &str, thread_id: u64) -> String {
    // Built by hand: `format!` cost several times as much, on every acquire.
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(thread_id);
    let mut id = String::with_capacity(client_id.len() + 1 + digits.len());
    id.push_str(client_id);
    id.push(':');
    id.push_str(digits);
    id
}

/// The numbers of token owners: `2^62 ..= 2^63 - 1`, above every thread id
/// and job number (the thread-id counter starts at 1), and within a Java
/// `long`, so a tool that reads the owner field's number as Redisson's
/// thread id still can.
pub(crate) const TOKEN_NUMBERS: std::ops::RangeInclusive<u64> = (1 << 62)..=(i64::MAX as u64);

/// Who owns a token-owned hold: `<uuid>:<number>`, the lock hash's field.
///
/// A token stands for one owner wherever it is presented: a hold taken
/// with it ([`Lock::lock_owned`](crate::Lock::lock_owned),
/// [`Lock::lock_with`](crate::Lock::lock_with)) is re-entered by whoever
/// presents it again, and can be released from any thread, or resumed in
/// another process ([`Lock::resume`](crate::Lock::resume)). Carry it as a
/// string: `Display` writes `<uuid>:<number>` and `FromStr` reads it back,
/// refusing anything else.
///
/// A valid token is a UUID in its hyphenated lower-case form, a colon, and
/// a decimal number from 2^62 to 2^63 - 1 without leading zeros (the
/// range no thread id of any keyholder client reaches, so a token never
/// names a thread's hold). Tokens minted by keyholder take the client's
/// UUID and a random number of that range; a token of your own may take
/// any UUID (one per deployment or per job, say).
///
/// ```
/// let token: keyholder::OwnerToken =
///     "8c1f0a4e-0000-4000-8000-000000000000:4611686018427387904".parse()?;
/// assert_eq!(token.to_string(), "8c1f0a4e-0000-4000-8000-000000000000:4611686018427387904");
/// assert!("8c1f0a4e-0000-4000-8000-000000000000:57".parse::<keyholder::OwnerToken>().is_err());
/// # Ok::<(), keyholder::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken {
    /// `<uuid>:<number>`, as written in Redis.
    owner: String,
}

impl OwnerToken {
    /// A new token of the client `client_id` (its UUID): a random number
    /// of the token range.
    pub(crate) fn mint(client_id: &str) -> OwnerToken {
        let span = TOKEN_NUMBERS.end() - TOKEN_NUMBERS.start() + 1;
        // 122 random bits; the low 62 are the offset into the range.
        let random = uuid::Uuid::new_v4().as_u128() as u64;
        let number = TOKEN_NUMBERS.start() + random % span;
        OwnerToken { owner: owner_id(client_id, number) }
    }

    /// The token a token-owned hold's owner field names (no check: it was
    /// made from a token).
    pub(crate) fn of_owner(owner: &str) -> OwnerToken {
        OwnerToken { owner: owner.to_owned() }
    }

    /// The owner id it writes in Redis: `<uuid>:<number>`.
    pub fn as_str(&self) -> &str {
        &self.owner
    }

    /// The number that stands for the token where the client keeps a
    /// thread id (its lock's local gate, its unlock latch): the owner id's
    /// hash with the top bit set, so that it is never a thread's id (they
    /// stay below 2^62) and depends on the whole string.
    pub(crate) fn local_id(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.owner.hash(&mut hasher);
        hasher.finish() | TOKEN_ID_BIT
    }
}

/// The bit every token's local id has and no thread id has.
const TOKEN_ID_BIT: u64 = 1 << 63;

/// True for a token's local id (`OwnerToken::local_id`), false for a
/// thread's id.
pub(crate) fn is_token_id(id: u64) -> bool {
    id & TOKEN_ID_BIT != 0
}

impl std::fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.owner)
    }
}

impl std::fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("OwnerToken").field(&self.owner).finish()
    }
}

impl FromStr for OwnerToken {
    type Err = Error;

    /// Reads `<uuid>:<number>` (see [`OwnerToken`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument),
    /// saying what is wrong, for anything else.
    fn from_str(s: &str) -> Result<OwnerToken> {
        let refuse = |why: &str| {
            Error::invalid_argument(format!(
                "owner token {s:?}: {why} (expected <uuid>:<number>, a hyphenated lower-case UUID and a number from 2^62 to 2^63 - 1)"
            ))
        };
        let (uuid, number) = s.rsplit_once(':').ok_or_else(|| refuse("no colon"))?;
        let parsed = uuid::Uuid::try_parse(uuid).map_err(|_| refuse("not a UUID"))?;
        if parsed.hyphenated().to_string() != uuid {
            return Err(refuse("the UUID is not in its hyphenated lower-case form"));
        }
        let n: u64 = number.parse().map_err(|_| refuse("the number is not a decimal number"))?;
        if n.to_string() != number {
            return Err(refuse("the number has leading zeros or a sign"));
        }
        if !TOKEN_NUMBERS.contains(&n) {
            return Err(refuse("the number is outside the token range, where it could name a thread"));
        }
        Ok(OwnerToken { owner: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_are_stable_per_thread_and_distinct_across_threads() {
        let here = current_thread_id();
        assert_eq!(here, current_thread_id());
        let there = std::thread::spawn(current_thread_id).join().unwrap();
        assert_ne!(here, there);
        assert!(here > 0 && there > 0);
    }

    #[test]
    fn unique_owner_numbers_are_never_a_threads_id() {
        let here = current_thread_id();
        let (a, b) = (unique_owner_number(), unique_owner_number());
        assert!(a != b && a != here && b != here);
        let there = std::thread::spawn(current_thread_id).join().unwrap();
        assert!(there != a && there != b);
    }

    #[test]
    fn owner_id_is_uuid_colon_decimal() {
        let id = owner_id("8c1f0a4e-0000-4000-8000-000000000000", 57);
        assert_eq!(id, "8c1f0a4e-0000-4000-8000-000000000000:57");
    }

    #[test]
    fn minted_tokens_parse_back_and_never_name_a_thread() {
        let uuid = uuid::Uuid::new_v4().to_string();
        let (a, b) = (OwnerToken::mint(&uuid), OwnerToken::mint(&uuid));
        assert_ne!(a, b);
        for token in [&a, &b] {
            let parsed: OwnerToken = token.to_string().parse().unwrap();
            assert_eq!(&parsed, token);
            let (id, number) = token.as_str().rsplit_once(':').unwrap();
            assert_eq!(id, uuid);
            let number: u64 = number.parse().unwrap();
            assert!(TOKEN_NUMBERS.contains(&number));
            // Thread ids and job numbers come from one counter from 1: far below.
            assert!(number > current_thread_id() && number > unique_owner_number());
            assert!(token.local_id() >= 1 << 63, "a gate id never a thread's");
        }
    }

    #[test]
    fn malformed_tokens_are_refused_with_invalid_argument() {
        let uuid = "8c1f0a4e-0000-4000-8000-000000000000";
        let low = format!("{uuid}:{}", TOKEN_NUMBERS.start());
        let high = format!("{uuid}:{}", TOKEN_NUMBERS.end());
        assert!(low.parse::<OwnerToken>().is_ok() && high.parse::<OwnerToken>().is_ok());
        for bad in [
            String::new(),
            uuid.to_owned(),
            format!("{uuid}:57"),
            format!("{uuid}:{}", TOKEN_NUMBERS.start() - 1),
            format!("{uuid}:{}", TOKEN_NUMBERS.end() + 1),
            format!("{uuid}:0{}", TOKEN_NUMBERS.start()),
            format!("{uuid}:+{}", TOKEN_NUMBERS.start()),
            format!("{}:{}", uuid.to_uppercase(), TOKEN_NUMBERS.start()),
            format!("{}:{}", uuid.replace('-', ""), TOKEN_NUMBERS.start()),
            format!("not-a-uuid:{}", TOKEN_NUMBERS.start()),
            format!("{uuid}:{}:1", TOKEN_NUMBERS.start()),
        ] {
            let refused = bad.parse::<OwnerToken>().expect_err(&bad);
            assert_eq!(refused.kind(), crate::ErrorKind::InvalidArgument, "{bad}");
        }
    }
}
