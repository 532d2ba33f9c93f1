//! The command line itself. (Having an integration test also makes
//! `cargo test --workspace` build the `hookraft` binary that the end-to-end
//! tests in `tests/` start.)

use std::process::Command;

fn hookraft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hookraft"))
}

/// The subcommands a `--help` text lists under `Commands:` (clap's own
/// `help` left out).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// `hookraft [path] --help`: succeeds, prints a usage line naming the path.
fn help_of(path: &[String]) -> String {
    let out = hookraft().args(path).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "hookraft {} --help failed: {}",
        path.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let usage = format!("Usage: hookraft {}", path.join(" "));
    assert!(text.contains(usage.trim_end()), "hookraft {} --help: {text}", path.join(" "));
    text
}

/// Every subcommand, nested ones included, answers `--help`; the tree is
/// the one the README's tour walks.
#[test]
fn every_subcommand_has_its_help() {
    let top = help_of(&[]);
    assert_eq!(subcommands(&top), ["serve", "receiver", "cluster", "keys"], "{top}");
    let mut to_visit: Vec<Vec<String>> = subcommands(&top).into_iter().map(|name| vec![name]).collect();
    let mut visited = Vec::new();
    while let Some(path) = to_visit.pop() {
        let text = help_of(&path);
        for child in subcommands(&text) {
            let mut next = path.clone();
            next.push(child);
            to_visit.push(next);
        }
        visited.push(path.join(" "));
    }
    for nested in ["cluster status", "cluster move", "cluster drain", "cluster add", "cluster remove"] {
        assert!(visited.iter().any(|v| v == nested), "{nested} not reached: {visited:?}");
    }
    assert!(visited.iter().any(|v| v.starts_with("keys ")), "no keys subcommand reached: {visited:?}");
}

#[test]
fn serve_refuses_a_non_loopback_address_without_a_token() {
    let dir = std::env::temp_dir().join(format!("hookraft-cli-test-{}", std::process::id()));
    let out = hookraft()
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(&dir)
        .env_remove("HOOKRAFT_API_TOKEN")
        .env_remove("HOOKRAFT_ADMIN_TOKEN")
        .env_remove("HOOKRAFT_READ_TOKEN")
        .env_remove("HOOKRAFT_TOKENS_FILE")
        .output()
        .unwrap();
    assert!(!out.status.success(), "must refuse to start");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("without a token") && text.contains("--api-token"), "{text}");
    assert!(!dir.exists(), "nothing is written before the refusal");
}

#[test]
fn serve_refuses_peers_without_a_cluster_secret_and_says_what_to_set() {
    let dir = std::env::temp_dir().join(format!("hookraft-cli-peers-{}", std::process::id()));
    let out = hookraft()
        .args(["serve", "--listen", "127.0.0.1:0", "--peers", "1=127.0.0.1:1,2=127.0.0.1:2", "--data-dir"])
        .arg(&dir)
        .env_remove("HOOKRAFT_CLUSTER_SECRET")
        .output()
        .unwrap();
    assert!(!out.status.success(), "must refuse to start");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("--cluster-secret") && text.contains("HOOKRAFT_CLUSTER_SECRET"), "{text}");
    assert!(!dir.exists(), "nothing is written before the refusal");
}

#[test]
fn serve_refuses_half_a_tls_configuration() {
    let out = hookraft().args(["serve", "--tls-cert", "cert.pem"]).output().unwrap();
    assert!(!out.status.success(), "a certificate without its key must be refused");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("--tls-key"), "{text}");
}

/// `hookraft keys ...` with `--keyring path`, in `dir`, with no
/// `HOOKRAFT_*` setting of the caller's shell.
fn keys(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    hookraft()
        .arg("keys")
        .args(args)
        .current_dir(dir)
        .env_remove("HOOKRAFT_KEYRING")
        .env_remove("HOOKRAFT_KEYRING_TEXT")
        .output()
        .unwrap()
}

/// The base64 key material of a keyring file: every `id = value` but `active`.
fn key_material(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(|line| line.split_once('='))
        .filter(|(name, _)| name.trim() != "active")
        .map(|(_, value)| value.trim().to_string())
        .collect()
}

/// Runs `args`, checks it succeeded and that neither stream shows a key of
/// `keyring`; returns stdout.
fn keys_ok(dir: &std::path::Path, keyring: &std::path::Path, args: &[&str]) -> String {
    let out = keys(dir, args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "hookraft keys {args:?} failed: {stderr}");
    for key in key_material(keyring) {
        assert!(key.len() >= 43, "a key is 32 bytes in base64: {key:?}");
        assert!(!stdout.contains(&key) && !stderr.contains(&key), "key material shown by {args:?}: {stdout}{stderr}");
    }
    stdout.into_owned()
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn keys_generate_list_activate_and_remove_edit_a_private_keyring_and_never_show_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let ring = dir.path().join("ring");
    let path = ring.to_str().unwrap();

    let created = keys_ok(dir.path(), &ring, &["generate", "--keyring", path]);
    assert!(created.contains("key k1 (active)") && created.contains("rewrap"), "{created}");
    assert_eq!(mode(&ring), 0o600);
    assert_eq!(key_material(&ring).len(), 1);
    assert_eq!(keys_ok(dir.path(), &ring, &["list", "--keyring", path]), "k1  (active)\n");

    let added = keys_ok(dir.path(), &ring, &["generate", "--keyring", path]);
    assert!(added.contains("k2") && added.contains("restart"), "{added}");
    assert_eq!(mode(&ring), 0o600);
    let material = key_material(&ring);
    assert_eq!(material.len(), 2);
    assert_ne!(material[0], material[1], "a new key is new material");
    assert_eq!(keys_ok(dir.path(), &ring, &["list", "--keyring", path]), "k1\nk2  (active)\n");

    keys_ok(dir.path(), &ring, &["activate", "k1", "--keyring", path]);
    assert_eq!(keys_ok(dir.path(), &ring, &["list", "--keyring", path]), "k1  (active)\nk2\n");
    assert_eq!(key_material(&ring), material, "activating changes no key");

    let refused = keys(dir.path(), &["remove", "k1", "--keyring", path]);
    assert!(!refused.status.success(), "the active key must not be removed");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("active key"), "{refused:?}");
    let unknown = keys(dir.path(), &["remove", "k9", "--keyring", path]);
    assert!(!unknown.status.success(), "an unknown key cannot be removed");
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no key \"k9\""), "{unknown:?}");
    assert_eq!(key_material(&ring), material, "a refused removal changes nothing");

    keys_ok(dir.path(), &ring, &["remove", "k2", "--keyring", path]);
    assert_eq!(keys_ok(dir.path(), &ring, &["list", "--keyring", path]), "k1  (active)\n");
    assert_eq!(key_material(&ring), material[..1], "k1 kept its key");
    assert_eq!(mode(&ring), 0o600);

    let spare = keys_ok(dir.path(), &ring, &["generate", "--keyring", path, "--id", "spare", "--no-activate"]);
    assert!(spare.contains("k1 stays the active key"), "{spare}");
    assert_eq!(keys_ok(dir.path(), &ring, &["list", "--keyring", path]), "k1  (active)\nspare\n");
}

#[test]
fn keys_find_the_keyring_in_hookraft_keyring_else_in_the_current_directory() {
    let dir = tempfile::tempdir().unwrap();
    let default = dir.path().join("hookraft-keyring");
    keys_ok(dir.path(), &default, &["generate"]);
    assert_eq!(mode(&default), 0o600);
    let named = dir.path().join("named");
    let out = hookraft()
        .args(["keys", "generate", "--id", "env1"])
        .current_dir(dir.path())
        .env("HOOKRAFT_KEYRING", &named)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(keys_ok(dir.path(), &default, &["list"]), "k1  (active)\n", "the default file is untouched");
    assert_eq!(keys_ok(dir.path(), &named, &["list", "--keyring", named.to_str().unwrap()]), "env1  (active)\n");
}

#[test]
fn keys_refuse_a_bad_or_missing_keyring_by_name_and_leave_it_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let ring = dir.path().join("ring");
    let key = "c2VjcmV0LWtleS1tYXRlcmlhbC0zMi1ieXRlcy1sb25n";
    // A line that lost its `=`: the key text stands where the name should.
    let bad = format!("active = k1\nk1 {key}\n");
    std::fs::write(&ring, &bad).unwrap();
    for args in [&["list"][..], &["generate"], &["activate", "k1"], &["remove", "k1"]] {
        let mut args = args.to_vec();
        args.extend(["--keyring", ring.to_str().unwrap()]);
        let out = keys(dir.path(), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must fail on a bad keyring");
        assert!(stderr.contains(ring.to_str().unwrap()) && stderr.contains("expected `name = value`"), "{stderr}");
        assert!(!stderr.contains(key) && !String::from_utf8_lossy(&out.stdout).contains(key), "{stderr}");
        assert_eq!(std::fs::read_to_string(&ring).unwrap(), bad, "{args:?} left the file alone");
    }
    let missing = dir.path().join("missing");
    let out = keys(dir.path(), &["list", "--keyring", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the keyring"), "{out:?}");
}
