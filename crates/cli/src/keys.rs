//! `hookraft keys ...`: payload encryption keys on the operator's side.
//!
//! - `generate`, `list`, `activate` and `remove` edit a keyring file (the
//!   format of `hookraft_core::payload::KeyringFile`) and call no node. The
//!   file is written readable by its owner only, and no command prints key
//!   material: only key ids.
//! - `rewrap` and `status` call one node's admin API
//!   (`/v1/cluster/payloads/...`, docs/API.md) with the client of
//!   `hookraft cluster`.
//!
//! The edits and the rewrap summary are pure functions of their inputs,
//! tested without files or nodes; [`run`] reads, writes and prints.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use hookraft_core::entropy::Entropy;
use hookraft_core::payload::KeyringFile;
use reqwest::Method;

use crate::admin::{AdminClient, Call, Target, pretty};

/// Flags of `hookraft keys`.
#[derive(clap::Args, Debug)]
pub struct KeysArgs {
    #[command(subcommand)]
    command: KeysCommand,
}

/// The keyring file a local subcommand edits.
#[derive(clap::Args, Debug, Clone)]
struct KeyringPath {
    /// The keyring file.
    #[arg(long, env = "HOOKRAFT_KEYRING", default_value = "./hookraft-keyring")]
    keyring: PathBuf,
}

#[derive(clap::Subcommand, Debug)]
enum KeysCommand {
    /// Create the keyring with one new key, or add a new key to it; the new
    /// key becomes the active one unless --no-activate.
    Generate {
        #[command(flatten)]
        file: KeyringPath,
        /// The new key's id [default: the next free k1, k2, ...].
        #[arg(long)]
        id: Option<String>,
        /// Add the key without sealing new payloads under it yet (ignored
        /// for a new keyring: its one key is active).
        #[arg(long)]
        no_activate: bool,
    },
    /// List the keys' ids and which one is active.
    List {
        #[command(flatten)]
        file: KeyringPath,
    },
    /// Make a key of the keyring the one new payloads are sealed under.
    Activate {
        id: String,
        #[command(flatten)]
        file: KeyringPath,
    },
    /// Remove a key that is not active. Payloads still sealed under it can
    /// no longer be opened by nodes given this keyring.
    Remove {
        id: String,
        #[command(flatten)]
        file: KeyringPath,
    },
    /// Seal every retained payload under the node's active key (those in
    /// clear too), then print what was done.
    Rewrap {
        #[command(flatten)]
        target: Target,
        /// Count the payloads by key without changing any.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show the node's keyring (ids only) and the keys it lacks.
    Status {
        #[command(flatten)]
        target: Target,
    },
}

/// Runs one `hookraft keys` subcommand.
pub async fn run(args: KeysArgs) -> anyhow::Result<()> {
    match args.command {
        KeysCommand::Generate { file, id, no_activate } => {
            let path = &file.keyring;
            let existing = read_if_present(path)?;
            let entropy = hookraft_node::io::OsEntropy;
            let generated = generate(existing, id.as_deref(), !no_activate, &entropy).map_err(anyhow::Error::msg)?;
            write(path, &generated.file)?;
            print!("{}", generated.report(path));
        }
        KeysCommand::List { file } => print!("{}", render_list(&read(&file.keyring)?)),
        KeysCommand::Activate { id, file } => {
            let path = &file.keyring;
            let mut keyring = read(path)?;
            let previous = activate(&mut keyring, &id).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            match previous {
                None => println!("{id} is already the active key of {}; nothing changed", path.display()),
                Some(previous) => {
                    write(path, &keyring)?;
                    println!("{id} is now the active key of {} ({previous} was).", path.display());
                    print!("{}", rollout_steps(path, &id, &previous));
                }
            }
        }
        KeysCommand::Remove { id, file } => {
            let path = &file.keyring;
            let mut keyring = read(path)?;
            remove(&mut keyring, &id).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            write(path, &keyring)?;
            print!("{}", removal_report(path, &id));
        }
        KeysCommand::Rewrap { target, dry_run } => {
            let client = AdminClient::new(&target, rewrap::REWRAP_TIMEOUT_MS)?;
            let totals = rewrap::rewrap(&client, &target.node, dry_run).await?;
            print!("{}", rewrap::render(&totals));
            if totals.failed() > 0 {
                bail!(
                    "{} payloads or secrets could not be opened: give the node the keys they name (`hookraft keys \
                     status` lists the missing ones), restart it and run the rewrap again",
                    totals.failed()
                );
            }
        }
        KeysCommand::Status { target } => {
            let client = AdminClient::new(&target, crate::admin::REQUEST_TIMEOUT_MS)?;
            let call = Call { method: Method::GET, path: "/v1/cluster/payloads/keys".into(), body: None };
            println!("{}", pretty(&client.call(&call).await?));
        }
    }
    Ok(())
}

fn read(path: &Path) -> anyhow::Result<KeyringFile> {
    hookraft_node::keyring::read_file(path).map_err(anyhow::Error::msg)
}

/// The keyring at `path`, or `None` when there is no file there yet.
fn read_if_present(path: &Path) -> anyhow::Result<Option<KeyringFile>> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => read(path).map(Some),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => bail!("cannot read the keyring {}: {error}", path.display()),
    }
}

fn write(path: &Path, file: &KeyringFile) -> anyhow::Result<()> {
    hookraft_node::keyring::write_file(path, file).map_err(anyhow::Error::msg)
}

/// A keyring after `generate`.
#[derive(Debug)]
struct Generated {
    file: KeyringFile,
    /// The new key's id.
    id: String,
    /// The active key before, when the keyring existed.
    previous_active: Option<String>,
}

/// Adds a key from `entropy` to `existing` (active if `activate`), or
/// makes a keyring of one active key when there is none.
fn generate(
    existing: Option<KeyringFile>,
    id: Option<&str>,
    activate: bool,
    entropy: &dyn Entropy,
) -> Result<Generated, String> {
    match existing {
        None => {
            let file = KeyringFile::generate(id, entropy)?;
            let id = file.active.clone();
            Ok(Generated { file, id, previous_active: None })
        }
        Some(mut file) => {
            let previous_active = file.active.clone();
            let id = file.add_generated(id, activate, entropy)?;
            Ok(Generated { file, id, previous_active: Some(previous_active) })
        }
    }
}

impl Generated {
    /// What was done and what the operator does next; key ids only.
    fn report(&self, path: &Path) -> String {
        let (id, shown) = (&self.id, path.display());
        let mut out = String::new();
        match &self.previous_active {
            None => {
                let _ = writeln!(out, "created {shown} with key {id} (active), readable by its owner only.");
                let _ = writeln!(out, "Next:");
                let _ = writeln!(
                    out,
                    "  1. give every node of the cluster this same keyring: copy the file (mode 0600) and start \
                     each node with --keyring FILE (or its text, `;` between lines, in HOOKRAFT_KEYRING_TEXT);"
                );
                let _ = writeln!(out, "  2. restart the nodes one at a time; new payloads are then sealed under {id};");
                let _ = writeln!(
                    out,
                    "  3. hookraft keys rewrap --node <any node>: seals the payloads stored in clear before."
                );
            }
            Some(previous) if *previous == self.file.active => {
                let _ = writeln!(out, "added key {id} to {shown}; {previous} stays the active key.");
                let _ = writeln!(out, "Next:");
                let _ = writeln!(
                    out,
                    "  1. copy {shown} to every node and restart them one at a time: every node can then open \
                     payloads sealed under {id};"
                );
                let _ = writeln!(
                    out,
                    "  2. hookraft keys activate {id} --keyring {shown}, copy and restart again: new payloads are \
                     then sealed under {id};"
                );
                let _ = writeln!(
                    out,
                    "  3. hookraft keys rewrap --node <any node>: reseals the retained payloads under {id}."
                );
            }
            Some(previous) => {
                let _ = writeln!(out, "added key {id} to {shown}; it is now the active key ({previous} was).");
                out.push_str(&rollout_steps(path, id, previous));
            }
        }
        out
    }
}

/// What to do after `active` replaced `previous` as the active key.
fn rollout_steps(path: &Path, active: &str, previous: &str) -> String {
    let shown = path.display();
    format!(
        "Next:\n\
         \x20 1. copy {shown} to every node, replacing its keyring;\n\
         \x20 2. restart the nodes one at a time: each seals new payloads under {active} once restarted; until \
         every node has {active}, one without it defers the deliveries of payloads sealed under {active} (to \
         avoid that, add a key with --no-activate, roll it out, then activate it and roll out again);\n\
         \x20 3. once every node runs with it: hookraft keys rewrap --node <any node>, which reseals the retained \
         payloads under {active};\n\
         \x20 4. when `hookraft keys rewrap --dry-run` shows no payload under {previous}, it may go: \
         hookraft keys remove {previous} --keyring {shown}, then roll the file out again.\n"
    )
}

fn removal_report(path: &Path, id: &str) -> String {
    let shown = path.display();
    format!(
        "removed key {id} from {shown}.\n\
         Nodes given this keyring cannot open payloads sealed under {id}: before rolling it out, check that \
         `hookraft keys rewrap --dry-run --node <any node>` shows none under {id}; then copy {shown} to every \
         node and restart them one at a time.\n"
    )
}

/// Makes `id` the active key. Returns the key that was active, or `None`
/// when `id` already was.
fn activate(file: &mut KeyringFile, id: &str) -> Result<Option<String>, String> {
    if !file.keys.iter().any(|(k, _)| k == id) {
        return Err(unknown_key(file, id));
    }
    if file.active == id {
        return Ok(None);
    }
    Ok(Some(std::mem::replace(&mut file.active, id.to_string())))
}

/// Removes the key `id`; the active key cannot be removed.
fn remove(file: &mut KeyringFile, id: &str) -> Result<(), String> {
    if file.active == id {
        return Err(format!(
            "{id} is the active key: new payloads are sealed under it. Activate another key first \
             (`hookraft keys activate <id>`)"
        ));
    }
    let before = file.keys.len();
    file.keys.retain(|(k, _)| k != id);
    if file.keys.len() == before {
        return Err(unknown_key(file, id));
    }
    Ok(())
}

fn unknown_key(file: &KeyringFile, id: &str) -> String {
    let ids: Vec<&str> = file.keys.iter().map(|(k, _)| k.as_str()).collect();
    // `id` comes from the command line, not the file: it may be echoed.
    format!("the keyring holds no key {id:?} (it holds {})", ids.join(", "))
}

/// The keys' ids in the order written, the active one marked.
fn render_list(file: &KeyringFile) -> String {
    let mut out = String::new();
    for (id, _) in &file.keys {
        let mark = if *id == file.active { "  (active)" } else { "" };
        let _ = writeln!(out, "{id}{mark}");
    }
    out
}

mod rewrap;

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use hookraft_node::io::SeededEntropy;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: KeysArgs,
    }

    fn parse(argv: &[&str]) -> KeysCommand {
        let mut full = vec!["keys"];
        full.extend_from_slice(argv);
        Cli::try_parse_from(full).expect("parses").args.command
    }

    fn ids(file: &KeyringFile) -> Vec<&str> {
        file.keys.iter().map(|(id, _)| id.as_str()).collect()
    }

    fn material(file: &KeyringFile) -> Vec<String> {
        file.keys.iter().map(|(_, key)| key.to_base64()).collect()
    }

    #[test]
    fn generate_makes_a_keyring_then_adds_the_next_free_id_active_unless_asked_not_to() {
        let entropy = SeededEntropy::new(7);
        let first = generate(None, None, false, &entropy).expect("a new keyring");
        assert_eq!((first.id.as_str(), first.file.active.as_str()), ("k1", "k1"), "the first key is always active");
        assert_eq!(first.previous_active, None);
        let second = generate(Some(first.file), None, true, &entropy).expect("added");
        assert_eq!((second.id.as_str(), second.file.active.as_str()), ("k2", "k2"));
        assert_eq!(second.previous_active.as_deref(), Some("k1"));
        let third = generate(Some(second.file), Some("spare"), false, &entropy).expect("added");
        assert_eq!(third.file.active, "k2");
        assert_eq!(ids(&third.file), ["k1", "k2", "spare"]);
        let material = material(&third.file);
        assert!(material[0] != material[1] && material[1] != material[2], "every key is new");
    }

    #[test]
    fn generate_refuses_a_taken_or_invalid_id() {
        let entropy = SeededEntropy::new(1);
        let file = generate(None, Some("k1"), true, &entropy).expect("new").file;
        assert!(generate(Some(file.clone()), Some("k1"), true, &entropy).unwrap_err().contains("already holds"));
        assert!(generate(Some(file.clone()), Some("bad id"), true, &entropy).is_err());
        assert!(generate(Some(file), Some("active"), true, &entropy).is_err());
    }

    #[test]
    fn activate_switches_the_active_key_and_names_the_one_it_replaced() {
        let entropy = SeededEntropy::new(2);
        let mut file = generate(None, None, true, &entropy).expect("new").file;
        file.add_generated(None, true, &entropy).expect("k2");
        assert_eq!(activate(&mut file, "k1"), Ok(Some("k2".into())));
        assert_eq!(file.active, "k1");
        assert_eq!(activate(&mut file, "k1"), Ok(None));
        let error = activate(&mut file, "k9").unwrap_err();
        assert!(error.contains("no key \"k9\"") && error.contains("k1, k2"), "{error}");
        assert_eq!(file.active, "k1");
    }

    #[test]
    fn remove_refuses_the_active_and_unknown_keys_and_removes_another() {
        let entropy = SeededEntropy::new(3);
        let mut file = generate(None, None, true, &entropy).expect("new").file;
        file.add_generated(None, false, &entropy).expect("k2");
        assert!(remove(&mut file, "k1").unwrap_err().contains("active key"));
        assert!(remove(&mut file, "k3").unwrap_err().contains("no key \"k3\""));
        assert_eq!(ids(&file), ["k1", "k2"]);
        remove(&mut file, "k2").expect("removed");
        assert_eq!(ids(&file), ["k1"]);
        assert_eq!(file.active, "k1");
    }

    #[test]
    fn no_report_or_listing_shows_key_material() {
        let entropy = SeededEntropy::new(4);
        let path = Path::new("ring");
        let first = generate(None, None, true, &entropy).expect("new");
        let second = generate(Some(first.file.clone()), None, true, &entropy).expect("added");
        let third = generate(Some(second.file.clone()), None, false, &entropy).expect("added");
        let list = render_list(&third.file);
        assert_eq!(list, "k1\nk2  (active)\nk3\n");
        let texts = [
            first.report(path),
            second.report(path),
            third.report(path),
            list,
            rollout_steps(path, "k2", "k1"),
            removal_report(path, "k1"),
            format!("{:?}", third.file),
        ];
        for text in &texts {
            for key in material(&third.file) {
                assert!(!text.contains(&key), "key material in {text}");
            }
        }
        assert!(texts[0].contains("created ring with key k1"), "{}", texts[0]);
        assert!(texts[1].contains("it is now the active key (k1 was)") && texts[1].contains("rewrap"), "{}", texts[1]);
        assert!(texts[2].contains("k2 stays the active key") && texts[2].contains("activate k3"), "{}", texts[2]);
    }

    #[test]
    fn local_subcommands_take_the_key_id_and_the_keyring_path() {
        let KeysCommand::Remove { id, file } = parse(&["remove", "k1", "--keyring", "/etc/ring"]) else {
            panic!("remove")
        };
        assert_eq!((id.as_str(), file.keyring.as_path()), ("k1", Path::new("/etc/ring")));
        let KeysCommand::Generate { id, no_activate, .. } = parse(&["generate", "--id", "k7", "--no-activate"]) else {
            panic!("generate")
        };
        assert_eq!((id.as_deref(), no_activate), (Some("k7"), true));
    }

    #[test]
    fn rewrap_takes_the_node_flags_of_hookraft_cluster() {
        let KeysCommand::Rewrap { target, dry_run } =
            parse(&["rewrap", "--node", "https://h:1", "--tls-ca", "ca.pem", "--dry-run"])
        else {
            panic!("rewrap")
        };
        assert!(dry_run);
        assert_eq!(target.node, "https://h:1");
        assert_eq!(target.tls_ca.as_deref(), Some(Path::new("ca.pem")));
    }
}
