//! Calling a bundled Lua script: EVALSHA, with EVAL as the fallback.
//!
//! redis-rs's `Script::invoke` answers NOSCRIPT with SCRIPT LOAD and a second
//! EVALSHA, which fails again if the script cache is flushed in between
//! (`SCRIPT FLUSH`, a failover to a server that never saw the script). Here
//! the fallback sends the script itself with EVAL, which cannot fail with
//! NOSCRIPT and caches the script for the next EVALSHA: one extra round trip
//! after a flush, and no caller ever sees NOSCRIPT.

use redis::{FromRedisValue, RedisResult, ToRedisArgs, Value};

/// A replica acknowledgement to wait for after a call, as Redisson's
/// `syncSlaves`: `WAIT replicas timeout` on the same connection, in the same
/// round trip.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    pub(crate) replicas: u32,
    pub(crate) timeout_ms: u64,
}

/// A bundled script: its source and SHA1 digest.
#[derive(Debug)]
pub(crate) struct LuaScript {
    source: &'static str,
    hash: String,
}

impl LuaScript {
    pub(crate) fn new(source: &'static str) -> Self {
        LuaScript { source, hash: redis::Script::new(source).get_hash().to_owned() }
    }

    /// A call of this script, to be given its keys and arguments.
    pub(crate) fn call(&self) -> Call<'_> {
        Call { script: self, keys: Vec::new(), args: Vec::new() }
    }
}

/// One call's `KEYS` and `ARGV`.
#[derive(Debug)]
pub(crate) struct Call<'s> {
    script: &'s LuaScript,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
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

    /// Runs the script by its digest, or by its source when the server does
    /// not have it cached.
    pub(crate) fn invoke<T: FromRedisValue>(&self, con: &mut redis::Connection) -> RedisResult<T> {
        match self.command("EVALSHA", &self.script.hash).query(con) {
            Err(e) if e.code() == Some("NOSCRIPT") => self.command("EVAL", self.script.source).query(con),
            outcome => outcome,
        }
    }

    /// Runs the script as [`invoke`](Call::invoke) does and, with `wait`,
    /// `WAIT` right behind it in one pipeline; returns the script's reply
    /// and, with `wait`, whether enough replicas acknowledged.
    pub(crate) fn invoke_waiting(
        &self,
        con: &mut redis::Connection,
        wait: Option<Wait>,
    ) -> RedisResult<(Value, Option<bool>)> {
        let Some(wait) = wait else { return Ok((self.invoke(con)?, None)) };
        let mut replies = self.pipeline("EVALSHA", &self.script.hash, wait).query::<Vec<Value>>(con)?;
        if matches!(replies.first(), Some(Value::ServerError(e)) if e.code() == "NOSCRIPT") {
            replies = self.pipeline("EVAL", self.script.source, wait).query::<Vec<Value>>(con)?;
        }
        let mut replies = replies.into_iter();
        let reply = replies.next().unwrap_or(Value::Nil).extract_error()?;
        let acked = match replies.next() {
            Some(Value::Int(n)) => u64::try_from(n).unwrap_or(0) >= u64::from(wait.replicas),
            _ => false,
        };
        Ok((reply, Some(acked)))
    }

    fn pipeline(&self, verb: &str, body: &str, wait: Wait) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.add_command(self.command(verb, body));
        pipe.cmd("WAIT").arg(wait.replicas).arg(wait.timeout_ms);
        pipe
    }

    fn command(&self, verb: &str, body: &str) -> redis::Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(body).arg(self.keys.len());
        for key in &self.keys {
            cmd.arg(key.as_slice());
        }
        for arg in &self.args {
            cmd.arg(arg.as_slice());
        }
        cmd
    }
}
