//! Smoke test: acquire, re-enter, contend across clients, release.
#![allow(clippy::unwrap_used)]
mod common;
use common::{RedisServer, ServerExt};
use std::time::{Duration, Instant};

#[test]
fn smoke() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("smoke").unwrap();
    let g = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    let g2 = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    drop(g2);
    assert_eq!(lock.hold_count().unwrap(), 1);
    let other = server.client();
    let l2 = other.lock("smoke").unwrap();
    assert!(l2.try_lock().unwrap().is_none());
    let t = std::thread::spawn(move || {
        let start = Instant::now();
        let g = l2.lock().unwrap();
        let e = start.elapsed();
        drop(g);
        e
    });
    std::thread::sleep(Duration::from_millis(200));
    g.unlock().unwrap();
    let waited = t.join().unwrap();
    println!("waited {waited:?}");
    assert!(waited < Duration::from_secs(2));
    assert!(!lock.is_locked().unwrap());
}
