//! The pause between a spin lock's tries: Redisson's `LockOptions.BackOff`.
//!
//! A spin lock has no unlock message to wait for, so a refused thread
//! sleeps and tries again: this is the one place in keyholder where a sleep
//! between tries is the point. The default is Redisson's
//! `ExponentialBackOff` (1 ms, doubled after each refusal plus a random
//! jitter of up to one millisecond per refusal so far, capped at 128 ms), so
//! contenders that collided once spread out; `ConstantBackOff` (64 ms) is
//! the other choice. Every sleep is also cut at the caller's deadline.

use std::time::Duration;

use crate::error::{Error, Result};

/// How long a [`SpinLock`](crate::SpinLock) sleeps between refused tries.
///
/// The same policies as Redisson's `LockOptions.BackOff`, with its
/// defaults: [`BackOff::default`] is exponential from 1 ms, ×2, at most
/// 128 ms, with jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackOff {
    /// Sleep `initial` after the first refusal; after each later one, the
    /// previous sleep × `multiplier`, plus a random 0 to `n - 1` ms after
    /// the `n`-th refusal, at most `max` (Redisson's `ExponentialBackOff`).
    Exponential {
        /// The first sleep (Redisson: 1 ms).
        initial: Duration,
        /// The longest sleep (Redisson: 128 ms).
        max: Duration,
        /// The growth factor (Redisson: 2).
        multiplier: u32,
    },
    /// Sleep `delay` after every refusal (Redisson's `ConstantBackOff`,
    /// 64 ms by default).
    Constant {
        /// The sleep.
        delay: Duration,
    },
}

impl Default for BackOff {
    fn default() -> Self {
        BackOff::exponential()
    }
}

impl BackOff {
    /// Redisson's default `ExponentialBackOff`: 1 ms, ×2, at most 128 ms.
    pub const fn exponential() -> BackOff {
        BackOff::Exponential {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(128),
            multiplier: 2,
        }
    }

    /// Redisson's default `ConstantBackOff`: 64 ms.
    pub const fn constant() -> BackOff {
        BackOff::Constant { delay: Duration::from_millis(64) }
    }

    /// Checks the policy as Redisson does (every duration and the
    /// multiplier positive), and the initial sleep not above the maximum;
    /// no sleep longer than a minute.
    pub(crate) fn validate(self) -> Result<()> {
        let positive = |d: Duration| !d.is_zero() && d <= MAX_SLEEP;
        let ok = match self {
            BackOff::Exponential { initial, max, multiplier } => {
                positive(initial) && positive(max) && initial <= max && multiplier > 0
            }
            BackOff::Constant { delay } => positive(delay),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::invalid_argument(format!(
                "bad spin-lock back-off {self:?}: durations must be from 1 ns to 60 s, the initial \
                 not above the maximum, the multiplier positive"
            )))
        }
    }

    /// The sleeps of one acquisition, in order.
    pub(crate) fn sleeps(self) -> Sleeps {
        let next = match self {
            BackOff::Exponential { initial, .. } => initial,
            BackOff::Constant { delay } => delay,
        };
        // A random seed per acquisition; xorshift from there.
        let seed = uuid::Uuid::new_v4().as_u128();
        Sleeps { policy: self, next, fails: 0, state: (seed as u64) | 1 }
    }
}

/// The longest sleep a policy may ask for.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// The sleeps of one acquisition (Redisson's `BackOffPolicy`).
#[derive(Debug)]
pub(crate) struct Sleeps {
    policy: BackOff,
    next: Duration,
    fails: u64,
    state: u64,
}

impl Sleeps {
    /// The sleep after the next refusal.
    pub(crate) fn next_sleep(&mut self) -> Duration {
        let BackOff::Exponential { max, multiplier, .. } = self.policy else { return self.next };
        let result = self.next;
        if result < max {
            self.fails += 1;
            let jitter = Duration::from_millis(self.random() % self.fails);
            self.next = result.saturating_mul(multiplier).saturating_add(jitter).min(max);
        }
        result
    }

    fn random(&mut self) -> u64 {
        // xorshift64: cheap, and plenty to spread contenders apart.
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_doubles_from_one_ms_with_jitter_up_to_128_ms() {
        let mut sleeps = BackOff::default().sleeps();
        let got: Vec<u128> = (0..12).map(|_| sleeps.next_sleep().as_millis()).collect();
        assert_eq!(got[0], 1);
        // Each sleep is the last ×2 plus a jitter below the refusal count.
        for (n, pair) in got.windows(2).enumerate() {
            let (last, next) = (pair[0], pair[1]);
            assert!(next == 128 || (next >= last * 2 && next < last * 2 + n as u128 + 1), "{got:?}");
        }
        assert!(got.iter().all(|&ms| ms <= 128));
        assert_eq!(got[11], 128, "{got:?}");
    }

    #[test]
    fn constant_sleeps_the_same() {
        let mut sleeps = BackOff::constant().sleeps();
        assert!((0..5).all(|_| sleeps.next_sleep() == Duration::from_millis(64)));
    }

    #[test]
    fn bad_policies_are_refused() {
        let zero = BackOff::Constant { delay: Duration::ZERO };
        assert!(zero.validate().is_err());
        let inverted = BackOff::Exponential {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(5),
            multiplier: 2,
        };
        assert!(inverted.validate().is_err());
        let no_growth = BackOff::Exponential {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(5),
            multiplier: 0,
        };
        assert!(no_growth.validate().is_err());
        assert!(BackOff::default().validate().is_ok());
        assert!(BackOff::constant().validate().is_ok());
    }
}
