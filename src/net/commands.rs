//! The one writer: commands packed by redis-rs (`redis::Cmd`), a call's
//! commands in one buffer and one write, flushed (a TLS session sends its
//! records at the flush). The lanes' batches pack their scripts themselves
//! (`store/batch.rs`, allocation-free, through redis-rs's `RedisWrite`) and
//! hand the bytes to [`write_packed`].

use std::io::{self, Write};

/// Writes `commands`, packed by redis-rs, in one write.
pub(crate) fn write_commands<W: Write>(out: &mut W, commands: &[redis::Cmd]) -> io::Result<()> {
    let mut packed = Vec::new();
    for command in commands {
        command.write_packed_command(&mut packed);
    }
    write_packed(out, &packed)
}

/// Writes commands already packed, and flushes. A failure leaves the stream
/// in an unknown state: the caller drops the connection.
pub(crate) fn write_packed<W: Write>(out: &mut W, packed: &[u8]) -> io::Result<()> {
    out.write_all(packed)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_go_out_as_redis_rs_packs_them_in_one_write() {
        /// Counts the writes.
        #[derive(Default)]
        struct Writes(Vec<Vec<u8>>);
        impl Write for Writes {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.push(buf.to_vec());
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut out = Writes::default();
        let commands = [redis::cmd("SUBSCRIBE").arg("a").arg(b"b\r\n").clone(), redis::cmd("PING")];
        write_commands(&mut out, &commands).unwrap();
        assert_eq!(
            out.0,
            vec![b"*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$3\r\nb\r\n\r\n*1\r\n$4\r\nPING\r\n".to_vec()]
        );
    }
}
