//! A test server with a wrong clock: `clock_shim.c`, compiled on first use
//! with the system's C compiler (`cc`, or `$CC`) into a shared library
//! that a server loads with `LD_PRELOAD`
//! ([`RedisServer::start_replica_of_with_clock_offset`](crate::RedisServer::start_replica_of_with_clock_offset)).
//! Linux's time namespaces offset the monotonic clocks only, and
//! libfaketime hangs a jemalloc-built redis-server at start-up (its
//! lookups recurse through the allocator's clock reads), hence a shim of
//! our own: forty lines of C that read the kernel's clock directly.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The variable the shim reads: milliseconds to add to the wall clock.
pub const OFFSET_VAR: &str = "KEYHOLDER_CLOCK_OFFSET_MS";

const SOURCE: &str = include_str!("clock_shim.c");

/// The compiled library (compiled once per test process).
pub fn library() -> &'static Path {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("keyholder-clock-shim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("clock_shim.c");
        let library = dir.join("clock_shim.so");
        std::fs::write(&source, SOURCE).unwrap();
        let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let out = Command::new(&compiler)
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&library)
            .arg(&source)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {compiler} to build the clock shim ({e}); install gcc"));
        assert!(
            out.status.success(),
            "{compiler} failed on the clock shim: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        library
    })
}
