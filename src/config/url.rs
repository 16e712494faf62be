//! What a Redis URL may be: checked before any I/O, with words that say
//! what is wrong, and shown without its password.

use crate::error::{Error, Result};

/// `url` with what sits between `://` and `@` (a user and password)
/// replaced.
pub(crate) fn without_credentials(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}<redacted>{}", &url[..scheme_end + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// The URL schemes keyholder connects with (redis-rs's names).
const SCHEMES: [&str; 7] = ["redis", "rediss", "valkey", "valkeys", "redis+unix", "valkey+unix", "unix"];

/// Refuses, before any I/O and with words that say what is wrong, a URL
/// redis-rs would refuse as `InvalidClientConfig` alone: an empty one, one
/// that is not a URL, another scheme than Redis's, a port out of range, no
/// host. What this lets through, redis-rs parses (and `endpoints::nodes::bad_url`
/// reports what it refuses).
pub(crate) fn check_url(url: &str) -> Result<()> {
    let bad = |what: String| {
        Err(Error::invalid_config(format!("bad redis url {:?}: {what}", without_credentials(url))))
    };
    const EXPECTED: &str = "expected redis://[[user]:password@]host[:port][/db] (or rediss:// for TLS, \
                            redis+unix:///path for a Unix socket)";
    if url.trim().is_empty() {
        return Err(Error::invalid_config(format!("bad redis url: it is empty; {EXPECTED}")));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad(format!("it is not a URL; {EXPECTED}"));
    };
    let scheme = scheme.to_ascii_lowercase();
    if !SCHEMES.contains(&scheme.as_str()) {
        return bad(format!(
            "the scheme {scheme}:// is not one keyholder connects with; use redis:// (TCP), rediss:// \
             (TLS) or redis+unix:// (a Unix socket)"
        ));
    }
    if scheme.ends_with("unix") {
        return Ok(());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host_port)| host_port);
    let (host, port) = match host_port.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, after)) => (host, after.strip_prefix(':')),
            None => return bad("its IPv6 address has no closing ']'".to_owned()),
        },
        None => match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return bad(format!("it names no host; {EXPECTED}"));
    }
    if let Some(port) = port {
        match port.parse::<u32>() {
            Ok(1..=65535) => {}
            Ok(_) => return bad(format!("the port {port} is outside 1 ..= 65535")),
            Err(_) => return bad(format!("the port {port:?} is not a number")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_say_what_is_wrong() {
        let said = |url: &str| check_url(url).unwrap_err().to_string();
        assert!(said("").contains("it is empty"));
        assert!(said("  ").contains("it is empty"));
        assert!(said("not a url").contains("\"not a url\": it is not a URL"));
        assert!(
            said("http://127.0.0.1:6379").contains("the scheme http:// is not one keyholder connects with")
        );
        assert!(said("redis://127.0.0.1:99999").contains("the port 99999 is outside 1 ..= 65535"));
        assert!(said("redis://127.0.0.1:0/").contains("the port 0 is outside"));
        assert!(said("redis://host:63x9/").contains("is not a number"));
        assert!(said("redis://:6379/").contains("names no host"));
        assert!(said("redis://[::1:6379/").contains("no closing"));
        let secret = said("http://user:secret@host:6379/");
        assert!(!secret.contains("secret"), "{secret}");
        for good in [
            "redis://127.0.0.1:6379/",
            "redis://127.0.0.1",
            "rediss://user:pw@redis.internal:6380/2",
            "redis://[::1]:6379/#insecure",
            "REDIS://host",
            "redis+unix:///tmp/redis.sock",
            "valkey://host:6379",
        ] {
            assert!(check_url(good).is_ok(), "{good}");
        }
    }
}
