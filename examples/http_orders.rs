//! A thread-per-request HTTP server whose handlers lock per order id.
//!
//! Each request gets a thread of its own (the shape of many sync Rust
//! services). `POST /orders/<id>/pay` takes the lock `orders:<id>`, does a
//! deliberately non-atomic read-modify-write of the order's payment count in
//! Redis, and calls a nested helper, `audit`, that takes the same lock again:
//! the same thread re-enters it (hold count 2) instead of waiting for itself.
//! Concurrent requests on the same order id serialize; on different ids they
//! run in parallel. `GET /orders/<id>` reports the count and how many
//! handlers were ever inside the same order's section at once (1 if the lock
//! works). `POST /shutdown` stops the server.
//!
//! ```text
//! cargo run --example http_orders                  # private redis-server, port chosen by the OS
//! cargo run --example http_orders -- --port 8080
//! curl -X POST http://127.0.0.1:8080/orders/42/pay
//! curl http://127.0.0.1:8080/orders/42
//! ```
//!
//! Without `REDIS_URL` it starts its own `redis-server` on a free loopback
//! port, as the demo does. It prints `listening on <address>` once it serves.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use keyholder::{Client, Lock};
use keyholder_testkit::server::url_from_env_or_start;
use parking_lot::Mutex;
use tiny_http::{Method, Request, Response, Server};

/// How long a handler waits for an order's lock before answering 503.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// The handler's work inside the lock, between its read and its write.
const WORK: Duration = Duration::from_millis(20);

/// What the request threads share.
struct App {
    client: Client,
    redis: redis::Client,
    /// Per order: handlers inside its section now, and the most at once.
    inside: Mutex<HashMap<String, (u32, u32)>>,
}

fn main() -> ExitCode {
    let mut port = 0u16;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next().map(|v| v.parse())) {
            ("--port", Some(Ok(p))) => port = p,
            _ => {
                eprintln!("usage: http_orders [--port PORT]");
                return ExitCode::from(2);
            }
        }
    }
    match serve(port) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("http_orders: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn serve(port: u16) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Stopped (when private) at the end of this function.
    let (url, _private) = url_from_env_or_start()?;
    let app = Arc::new(App {
        client: Client::open(url.as_str())?,
        redis: redis::Client::open(url.as_str())?,
        inside: Mutex::new(HashMap::new()),
    });
    let server = Server::http(("127.0.0.1", port))?;
    let addr = server.server_addr().to_ip().ok_or("not a TCP address")?;
    println!("listening on {addr}");
    for request in server.incoming_requests() {
        if request.method() == &Method::Post && request.url() == "/shutdown" {
            request.respond(Response::from_string("bye\n"))?;
            break;
        }
        // Thread per request.
        let app = Arc::clone(&app);
        std::thread::spawn(move || {
            let (status, body) = match route(&app, &request) {
                Ok(answer) => answer,
                Err(e) => (500, format!("error: {e}\n")),
            };
            let _ = request.respond(Response::from_string(body).with_status_code(status));
        });
    }
    app.client.shutdown();
    Ok(())
}

type Answer = (u16, String);

fn route(app: &App, request: &Request) -> Result<Answer, Box<dyn std::error::Error>> {
    let path: Vec<&str> = request.url().trim_matches('/').split('/').collect();
    match (request.method(), path.as_slice()) {
        (Method::Post, ["orders", id, "pay"]) => pay(app, id),
        (Method::Get, ["orders", id]) => show(app, id),
        _ => Ok((404, "not found\n".to_owned())),
    }
}

fn order_lock(app: &App, id: &str) -> keyholder::Result<Lock> {
    app.client.lock(&format!("orders:{id}"))
}

/// `POST /orders/<id>/pay`: one more payment on the order, under its lock.
fn pay(app: &App, id: &str) -> Result<Answer, Box<dyn std::error::Error>> {
    let lock = order_lock(app, id)?;
    let Some(guard) = lock.try_lock_for(LOCK_WAIT)? else {
        return Ok((503, format!("order {id} is busy\n")));
    };
    enter(app, id);
    let mut con = app.redis.get_connection()?;
    let key = format!("order:{id}:payments");
    let count: u64 = redis::cmd("GET").arg(&key).query::<Option<u64>>(&mut con)?.unwrap_or(0);
    std::thread::sleep(WORK);
    let _: () = redis::cmd("SET").arg(&key).arg(count + 1).query(&mut con)?;
    // A nested handler that locks the same order: re-entered, not awaited.
    let depth = audit(app, id, count + 1, &mut con)?;
    leave(app, id);
    guard.unlock()?;
    Ok((200, format!("order {id} payments={} reentered_hold_count={depth}\n", count + 1)))
}

/// Appends to the order's audit log, under the order's lock: called on its
/// own elsewhere, and from `pay` while the lock is held. Returns the hold
/// count it saw.
fn audit(
    app: &App,
    id: &str,
    payments: u64,
    con: &mut redis::Connection,
) -> Result<u32, Box<dyn std::error::Error>> {
    let lock = order_lock(app, id)?;
    let _guard = lock.lock()?;
    let _: i64 = redis::cmd("RPUSH").arg(format!("order:{id}:audit")).arg(payments).query(con)?;
    Ok(lock.hold_count()?)
}

/// `GET /orders/<id>`: the payment count and the most handlers ever inside.
fn show(app: &App, id: &str) -> Result<Answer, Box<dyn std::error::Error>> {
    let mut con = app.redis.get_connection()?;
    let count: Option<u64> = redis::cmd("GET").arg(format!("order:{id}:payments")).query(&mut con)?;
    let audit: u64 = redis::cmd("LLEN").arg(format!("order:{id}:audit")).query(&mut con)?;
    let most = app.inside.lock().get(id).map_or(0, |(_, most)| *most);
    Ok((200, format!("order {id} payments={} audit={audit} max_inside={most}\n", count.unwrap_or(0))))
}

fn enter(app: &App, id: &str) {
    let mut inside = app.inside.lock();
    let (now, most) = inside.entry(id.to_owned()).or_insert((0, 0));
    *now += 1;
    *most = (*most).max(*now);
}

fn leave(app: &App, id: &str) {
    if let Some((now, _)) = app.inside.lock().get_mut(id) {
        *now -= 1;
    }
}
