//! Every Lua script's header is its contract: each documents its `KEYS`,
//! `ARGV` and replies, and docs/redisson-compat.md quotes each verbatim.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[test]
fn every_script_documents_its_contract_in_a_header() {
    let mut scripts = 0;
    for path in lua_scripts() {
        scripts += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.display();
        assert!(text.starts_with("--"), "{file} does not open with a header comment");
        let header: String = text.lines().take_while(|l| l.starts_with("--")).collect::<Vec<_>>().join("\n");
        for word in ["KEYS[", "ARGV[", "Returns"] {
            assert!(header.contains(word), "{file}'s header does not document {word}");
        }
    }
    assert!(scripts >= 4, "only {scripts} scripts under lua/");
}

/// docs/redisson-compat.md quotes every script's header comment; they must
/// not drift apart.
#[test]
fn the_compat_doc_quotes_every_script_header_verbatim() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/redisson-compat.md")).unwrap();
    for path in lua_scripts() {
        let text = std::fs::read_to_string(&path).unwrap();
        let header: Vec<&str> = text.lines().take_while(|l| l.starts_with("--")).collect();
        let quoted = format!("```lua\n{}\n```", header.join("\n"));
        assert!(
            doc.contains(&quoted),
            "docs/redisson-compat.md does not quote {}'s header as it is",
            path.display()
        );
    }
}

/// Every script under `lua/`, one folder per kind (`lua/<kind>/*.lua`).
fn lua_scripts() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    let mut scripts = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "lua") {
                scripts.push(path);
            }
        }
    }
    scripts.sort();
    scripts
}
