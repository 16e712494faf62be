//! Calling a bundled Lua script: EVALSHA, with EVAL as the fallback.
//!
//! redis-rs's `Script::invoke` answers NOSCRIPT with SCRIPT LOAD and a second
//! EVALSHA, which fails again if the script cache is flushed in between
//! (`SCRIPT FLUSH`, a failover to a server that never saw the script). Here
//! the fallback sends the script itself with EVAL, which cannot fail with
//! NOSCRIPT and caches the script for the next EVALSHA: one extra round trip
//! after a flush, and no caller ever sees NOSCRIPT.

use std::sync::OnceLock;

use redis::{RedisResult, ToRedisArgs, Value};

use crate::error::Result;
use crate::store::batch::{Bulks, Request};
use crate::store::lanes::Session;

/// A bundled script: its source and SHA1 digest. Kinds keep theirs in
/// `static`s (`LuaScript::new(include_str!(..))`); the digest is computed
/// on first use.
#[derive(Debug)]
pub(crate) struct LuaScript {
    source: &'static str,
    hash: OnceLock<String>,
}

impl LuaScript {
    pub(crate) const fn new(source: &'static str) -> Self {
        LuaScript { source, hash: OnceLock::new() }
    }

    fn hash(&self) -> &str {
        self.hash.get_or_init(|| redis::Script::new(self.source).get_hash().to_owned())
    }

    /// A call of this script, to be given its keys and arguments.
    pub(crate) fn call(&self) -> Call<'_> {
        // The lock scripts' keys and arguments fit without growing.
        Call { script: self, keys: Bulks::with_capacity(384), args: Bulks::with_capacity(384) }
    }
}

/// One call's `KEYS` and `ARGV`, packed for the wire as they are given.
#[derive(Debug)]
pub(crate) struct Call<'s> {
    script: &'s LuaScript,
    keys: Bulks,
    args: Bulks,
}

impl Call<'_> {
    /// Appends to `KEYS`.
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Appends to `ARGV`.
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Appends `parts`, joined by single spaces, to `ARGV` as one argument.
    pub(crate) fn arg_joined(&mut self, parts: &[&str]) -> &mut Self {
        self.args.write_joined(parts);
        self
    }

    /// Runs the script by its digest, or by its source when the server does
    /// not have it cached; with `acked`, asks for the replicas'
    /// acknowledgement (a `WAIT` in the same round trip, see
    /// `store/batch.rs`). Returns the script's reply, an error reply as the
    /// inner error, and whether the replicas acknowledged (`None` when none
    /// were asked for).
    pub(crate) fn invoke(
        &self,
        session: &mut Session<'_>,
        acked: bool,
    ) -> Result<(RedisResult<Value>, Option<bool>)> {
        let request = |verb: &str, body: &str| {
            let request = self.request(verb, body);
            if acked { request.acknowledged() } else { request }
        };
        let mut replies = session.send(request("EVALSHA", self.script.hash()))?;
        if matches!(replies.values.first(), Some(Value::ServerError(e)) if e.code() == "NOSCRIPT") {
            replies = session.send(request("EVAL", self.script.source))?;
        }
        let reply = replies.values.into_iter().next().unwrap_or(Value::Nil).extract_error();
        Ok((reply, replies.acked))
    }

    /// The call as it goes on the wire, by the script's digest (`EVALSHA`)
    /// or, `by_source`, by its source (`EVAL`): for a connection of its own
    /// (the tracking connection's renewals, `kinds/family/silent.rs`).
    pub(crate) fn packed(&self, by_source: bool) -> Vec<u8> {
        let request = if by_source {
            self.request("EVAL", self.script.source)
        } else {
            self.request("EVALSHA", self.script.hash())
        };
        request.into_packed().0
    }

    /// `verb body numkeys KEYS... ARGV...`, packed.
    fn request(&self, verb: &str, body: &str) -> Request {
        Request::script(verb, body, &self.keys, &self.args)
    }
}
