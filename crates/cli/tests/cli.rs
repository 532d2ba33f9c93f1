//! The command line itself. (Having an integration test also makes
//! `cargo test --workspace` build the `hookraft` binary that the end-to-end
//! tests in `tests/` start.)

use std::process::Command;

fn hookraft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hookraft"))
}

#[test]
fn help_lists_serve_and_receiver() {
    let out = hookraft().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("serve") && text.contains("receiver"), "{text}");
}

#[test]
fn serve_refuses_a_non_loopback_address_without_a_token() {
    let dir = std::env::temp_dir().join(format!("hookraft-cli-test-{}", std::process::id()));
    let out = hookraft()
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(&dir)
        .env_remove("HOOKRAFT_API_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success(), "must refuse to start");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("without an API token"), "{text}");
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
