//! Every Lua script's header is its contract: each documents its `KEYS`,
//! `ARGV` and replies, and docs/reference/scripts.md quotes each verbatim.
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

/// docs/reference/scripts.md quotes every script's header comment; they must
/// not drift apart.
#[test]
fn the_compat_doc_quotes_every_script_header_verbatim() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/reference/scripts.md")).unwrap();
    for path in lua_scripts() {
        let text = std::fs::read_to_string(&path).unwrap();
        let header: Vec<&str> = text.lines().take_while(|l| l.starts_with("--")).collect();
        let quoted = format!("```lua\n{}\n```", header.join("\n"));
        assert!(
            doc.contains(&quoted),
            "docs/reference/scripts.md does not quote {}'s header as it is",
            path.display()
        );
    }
}

/// Each bundled script is sent as its header's `-- Prepended:` line says:
/// the `lua/common/` files it lists, in that order, then the script. The
/// kinds assemble that text with `concat!(include_str!(..), ..)` in their
/// `LuaScript` statics (the bench crate likewise); read from the Rust
/// sources here, so a script whose header and static disagree (a helper
/// missing from the text sent, or a header that names a file not sent)
/// fails here rather than in Redis.
#[test]
fn every_script_is_sent_with_the_common_files_its_header_names() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut bundled = std::collections::BTreeSet::new();
    for (dir, crate_src) in [("src", true), ("bench/src", false)] {
        for file in files_under(&root.join(dir), "rs") {
            let text = std::fs::read_to_string(&file).unwrap();
            for statement in text.split(';') {
                let paths: Vec<String> = statement
                    .split("include_str!(\"")
                    .skip(1)
                    .map(|p| &p[..p.find('"').unwrap()])
                    .filter_map(|p| p.rsplit_once("lua/").map(|(_, p)| format!("lua/{p}")))
                    .filter(|p| p.ends_with(".lua"))
                    .collect();
                let Some((script, commons)) = paths.split_last() else { continue };
                let named = prelude(&std::fs::read_to_string(root.join(script)).unwrap());
                assert_eq!(
                    commons,
                    &named[..],
                    "{}: {script} is sent with {commons:?}, its header names {named:?}",
                    file.display()
                );
                if crate_src {
                    bundled.insert(script.clone());
                }
            }
        }
    }
    for path in lua_scripts() {
        let name = path.strip_prefix(root).unwrap().display().to_string();
        assert!(bundled.contains(&name), "{name} is not bundled by any LuaScript static under src/");
        for common in prelude(&std::fs::read_to_string(&path).unwrap()) {
            assert!(common.starts_with("lua/common/"), "{name} prepends {common}, outside lua/common/");
            assert!(root.join(&common).is_file(), "{name} prepends {common}, which does not exist");
        }
    }
}

/// The files under `lua/common/` are prepended to scripts, so each must
/// end its last line (the script follows on the next) and define nothing
/// global (Redis refuses a script that does): every top-level statement is
/// `local`.
#[test]
fn common_lua_files_define_only_locals() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/common");
    let files = files_under(&root, "lua");
    assert!(files.len() >= 4, "only {} files under lua/common", files.len());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.display();
        assert!(text.starts_with("-- lua/common/"), "{file} does not open with a comment naming it");
        assert!(
            text.ends_with("end\n") || text.ends_with("'\n"),
            "{file} does not end with a whole line of code"
        );
        for line in text.lines() {
            let top = !line.starts_with(' ') && !line.starts_with("--") && !line.is_empty();
            assert!(
                !top || line.starts_with("local ") || line == "end",
                "{file}: a top-level statement that is not local: {line}"
            );
        }
    }
}

/// A script that cannot take a `lua/common/` file (the lock's acquire and
/// release scripts build no closure before their common case, ADR 39)
/// keeps an inline copy of the shared part between `-- <common:NAME>` and
/// `-- </common:NAME>`; the file under `lua/common/` marks the same part
/// with the same name. Every copy of a part must be the file's, line for
/// line (indentation aside).
#[test]
fn inline_copies_of_common_parts_are_identical() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    let mut parts: std::collections::BTreeMap<String, Vec<(String, Vec<String>)>> = Default::default();
    for path in files_under(&root, "lua") {
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.strip_prefix(&root).unwrap().display().to_string();
        let mut open: Option<(String, Vec<String>)> = None;
        for line in text.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("-- <common:") {
                assert!(open.is_none(), "{file}: a common part opens inside another");
                let name = rest.split('>').next().unwrap().to_owned();
                open = Some((name, Vec::new()));
            } else if let Some(rest) = line.strip_prefix("-- </common:") {
                let (name, body) = open.take().unwrap_or_else(|| panic!("{file}: {line} closes nothing"));
                assert_eq!(rest.split('>').next().unwrap(), name, "{file}: {line} closes another part");
                parts.entry(name).or_default().push((file.clone(), body));
            } else if let Some((_, body)) = open.as_mut() {
                body.push(line.to_owned());
            }
        }
        assert!(open.is_none(), "{file}: a common part is not closed");
    }
    assert!(!parts.is_empty(), "no common parts marked under lua/");
    for (name, copies) in &parts {
        let Some((_, original)) = copies.iter().find(|(f, _)| f.starts_with("common/")) else {
            panic!("common part {name} is marked outside lua/common/ only");
        };
        assert!(copies.len() >= 2, "common part {name} has no copy: unmark it");
        for (file, body) in copies {
            assert_eq!(body, original, "lua/{file}'s copy of common part {name} differs from lua/common's");
        }
    }
}

/// The `lua/common/` files a script's header lists on its `-- Prepended:`
/// line, none when it has no such line.
fn prelude(script: &str) -> Vec<String> {
    script
        .lines()
        .take_while(|l| l.starts_with("--"))
        .find_map(|l| l.strip_prefix("-- Prepended: "))
        .map(|list| list.split(", ").map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Every script under `lua/`, one folder per kind (`lua/<kind>/*.lua`);
/// `lua/common/` holds no scripts, only what scripts share.
fn lua_scripts() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    files_under(&root, "lua").into_iter().filter(|p| !p.starts_with(root.join("common"))).collect()
}

/// The files under `dir` (recursively) whose extension is `ext`, sorted.
fn files_under(dir: &std::path::Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == ext) {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}
