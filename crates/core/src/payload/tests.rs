use std::sync::Mutex;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_core::Rng;

use super::*;

pub(super) struct Seeded(Mutex<StdRng>);

impl Entropy for Seeded {
    fn fill(&self, dest: &mut [u8]) {
        self.0.lock().unwrap().fill_bytes(dest);
    }
}

pub(super) fn entropy() -> Seeded {
    entropy_seeded(11)
}

pub(super) fn entropy_seeded(seed: u64) -> Seeded {
    Seeded(Mutex::new(StdRng::seed_from_u64(seed)))
}

fn ring(active: &str, ids: &[&str]) -> (KeyringFile, Keyring) {
    let entropy = entropy();
    let mut file = KeyringFile { active: String::new(), keys: Vec::new() };
    for id in ids {
        file.add_generated(Some(id), false, &entropy).expect("adds");
    }
    file.active = active.to_string();
    let ring = Keyring::new(&file).expect("loads");
    (file, ring)
}

fn bincode_of<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("encodes")
}

fn from_bincode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard()).map(|(v, _)| v).map_err(|e| e.to_string())
}

const SECRET: &str = r#"{"card":"4111-1111-1111-1111","name":"Ada Lovelace"}"#;

#[test]
fn a_sealed_payload_opens_to_its_plaintext_and_holds_none_of_it() {
    let (_, ring) = ring("k1", &["k1"]);
    let sealed = ring.seal("evt_1", "card.charged", SECRET.as_bytes(), &entropy());
    assert!(sealed.is_sealed());
    assert_eq!(sealed.key_id(), Some("k1"));
    assert_eq!(sealed.len(), 3 + 2 + 24 + SECRET.len() + 16);
    let bytes = sealed.as_bytes();
    assert!(!bytes.windows(9).any(|w| w == b"4111-1111"), "ciphertext holds the plaintext");
    assert!(!bytes.windows(8).any(|w| w == b"Lovelace"));
    assert_eq!(&*ring.open("evt_1", "card.charged", &sealed).expect("opens"), SECRET.as_bytes());
}

#[test]
fn every_seal_draws_a_fresh_nonce() {
    let (_, ring) = ring("k1", &["k1"]);
    let entropy = entropy();
    let a = ring.seal("evt_1", "t", b"{}", &entropy);
    let b = ring.seal("evt_1", "t", b"{}", &entropy);
    assert_ne!(a, b, "same plaintext, same event: different bytes");
}

#[test]
fn a_changed_byte_anywhere_after_the_key_id_fails_authentication() {
    let (_, ring) = ring("k1", &["k1"]);
    let sealed = ring.seal("evt_1", "t", SECRET.as_bytes(), &entropy());
    let header = 3 + 2;
    for at in header..sealed.len() {
        let mut bytes = sealed.as_bytes().to_vec();
        bytes[at] ^= 0x01;
        let tampered = Payload::from_stored(Arc::from(bytes)).expect("still well formed");
        assert_eq!(
            ring.open("evt_1", "t", &tampered),
            Err(OpenError::Tampered("k1".into())),
            "byte {at} changed and it still opened"
        );
    }
}

#[test]
fn a_payload_moved_to_another_event_or_type_fails_authentication() {
    let (_, ring) = ring("k1", &["k1"]);
    let sealed = ring.seal("evt_1", "order.paid", SECRET.as_bytes(), &entropy());
    assert_eq!(ring.open("evt_2", "order.paid", &sealed), Err(OpenError::Tampered("k1".into())));
    assert_eq!(ring.open("evt_1", "order.refunded", &sealed), Err(OpenError::Tampered("k1".into())));
    // Length prefixes: moving a character between id and type changes the data.
    let sealed = ring.seal("evt_1", "ab", b"{}", &entropy());
    assert!(ring.open("evt_1a", "b", &sealed).is_err());
}

#[test]
fn a_payload_relabelled_with_another_key_of_the_ring_fails_authentication() {
    let (_, ring) = ring("k1", &["k1", "k2"]);
    let sealed = ring.seal("evt_1", "t", SECRET.as_bytes(), &entropy());
    let mut bytes = sealed.as_bytes().to_vec();
    bytes[4] = b'2'; // "k1" -> "k2"
    let relabelled = Payload::from_stored(Arc::from(bytes)).expect("well formed");
    assert_eq!(relabelled.key_id(), Some("k2"));
    assert_eq!(ring.open("evt_1", "t", &relabelled), Err(OpenError::Tampered("k2".into())));
}

#[test]
fn a_key_missing_from_the_ring_is_named() {
    let (_, old) = ring("k2", &["k1", "k2"]);
    let (_, without) = ring("k1", &["k1"]);
    let sealed = old.seal("evt_1", "t", b"{}", &entropy());
    let error = without.open("evt_1", "t", &sealed).expect_err("k2 is missing");
    assert_eq!(error, OpenError::MissingKey("k2".into()));
    assert_eq!(error.to_string(), "key k2 is not in this node's keyring");
    assert_eq!(open(None, "evt_1", "t", &sealed), Err(OpenError::MissingKey("k2".into())));
}

#[test]
fn rotation_keeps_old_payloads_readable_while_their_key_is_in_the_ring() {
    let entropy = entropy();
    let (mut file, before) = ring("k1", &["k1"]);
    let old = before.seal("evt_1", "t", b"{\"old\":1}", &entropy);
    file.add_generated(None, true, &entropy).expect("adds k2");
    let after = Keyring::new(&file).expect("loads");
    assert_eq!(after.active_id(), "k2");
    let new = after.seal("evt_2", "t", b"{\"new\":1}", &entropy);
    assert_eq!(new.key_id(), Some("k2"));
    assert_eq!(&*after.open("evt_1", "t", &old).expect("old key kept"), b"{\"old\":1}");
    assert_eq!(&*after.open("evt_2", "t", &new).expect("new key"), b"{\"new\":1}");
}

#[test]
fn a_clear_payload_opens_as_it_is_with_or_without_a_keyring() {
    let (_, ring) = ring("k1", &["k1"]);
    let clear = Payload::clear(SECRET);
    assert!(!clear.is_sealed());
    assert_eq!(clear.key_id(), None);
    assert_eq!(&*ring.open("evt_1", "t", &clear).expect("opens"), SECRET.as_bytes());
    assert_eq!(&*open(None, "evt_1", "t", &clear).expect("opens"), SECRET.as_bytes());
}

#[test]
fn a_clear_payload_encodes_as_the_text_did_so_old_logs_decode() {
    let text: Arc<str> = Arc::from(SECRET);
    let clear = Payload::clear(SECRET);
    assert_eq!(bincode_of(&clear), bincode_of(&text), "same bytes as the Arc<str> it replaced");
    assert_eq!(from_bincode::<Payload>(&bincode_of(&text)), Ok(clear));
}

#[test]
fn a_sealed_payload_round_trips_through_bincode() {
    let (_, ring) = ring("k1", &["k1"]);
    let sealed = ring.seal("evt_1", "t", SECRET.as_bytes(), &entropy());
    let decoded: Payload = from_bincode(&bincode_of(&sealed)).expect("decodes");
    assert_eq!(decoded, sealed);
    assert_eq!(&*ring.open("evt_1", "t", &decoded).expect("opens"), SECRET.as_bytes());
}

#[test]
fn malformed_stored_bytes_are_refused_on_decode() {
    for (bytes, why) in [
        (vec![], "empty"),
        (vec![0x00], "truncated"),
        (vec![0x00, 9, 1, b'k'], "unknown layout"),
        (vec![0x00, 1, 2, b'k', b'1'], "truncated"),
        ([vec![0x00, 1, 2, b'k', b'!'], vec![0; 40]].concat(), "invalid key id"),
        (vec![0xff, 0xfe], "not UTF-8"),
    ] {
        let error = from_bincode::<Payload>(&bincode_of(&serde_bytes(&bytes))).expect_err(why);
        assert!(error.contains(why), "{why}: {error}");
    }
}

/// `bytes` encoded as a byte string.
fn serde_bytes(bytes: &[u8]) -> impl Serialize + '_ {
    struct Bytes<'a>(&'a [u8]);
    impl Serialize for Bytes<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }
    Bytes(bytes)
}

#[test]
fn debug_shows_neither_payloads_nor_keys() {
    let (file, ring) = ring("k1", &["k1"]);
    let sealed = ring.seal("evt_1", "t", SECRET.as_bytes(), &entropy());
    let shown = format!("{file:?} {ring:?} {sealed:?} {:?}", Payload::clear(SECRET));
    let key = file.keys[0].1.to_base64();
    assert!(!shown.contains(&key), "{shown}");
    assert!(!shown.contains("Lovelace"), "{shown}");
    assert!(shown.contains("k1"), "{shown}");
}

#[test]
fn the_keyring_text_round_trips_and_takes_semicolons_for_newlines() {
    let (file, _) = ring("k2", &["k1", "k2"]);
    let text = file.render();
    let parsed = KeyringFile::parse(&text).expect("parses");
    assert_eq!(parsed.active, "k2");
    assert_eq!(parsed.render(), text);
    let inline = format!("active=k2; k1={}; k2={}", file.keys[0].1.to_base64(), file.keys[1].1.to_base64());
    let ring = Keyring::parse(&inline).expect("parses");
    assert_eq!(ring.active_id(), "k2");
    assert_eq!(ring.ids().collect::<Vec<_>>(), ["k1", "k2"]);
}

#[test]
fn a_bad_keyring_is_refused_with_a_reason_that_shows_no_key() {
    let key = KeyMaterial::generate(&entropy()).to_base64();
    let short = base64::engine::general_purpose::STANDARD.encode([7u8; 16]);
    for (text, why) in [
        (format!("k1 = {key}"), "no active key"),
        (format!("active = k9\nk1 = {key}"), "active key k9 is not in the keyring"),
        ("active = k1".to_string(), "holds no key"),
        (format!("active = k1\nk1 = {key}\nk1 = {key}"), "given twice"),
        (format!("active = k1\nk1 = {short}"), "is 16 bytes; a key is 32"),
        ("active = k1\nk1 = not-base64!".to_string(), "is not base64"),
        (format!("active = k1\nk 1 = {key}"), "must be 1 to 64"),
        ("active = k1\nk1 abc".to_string(), "expected `name = value`"),
        (format!("active = k1\nk1 {key}"), "a key id must be 1 to 64"),
        (format!("active = k1\nactive = k1\nk1 = {key}"), "`active` is given twice"),
    ] {
        let error = KeyringFile::parse(&text).expect_err(why);
        assert!(error.contains(why), "{why}: {error}");
        assert!(!error.contains(&key), "the error shows the key: {error}");
    }
}

#[test]
fn generated_ids_take_the_next_free_number() {
    let entropy = entropy();
    let mut file = KeyringFile::generate(None, &entropy).expect("one key");
    assert_eq!(file.active, "k1");
    assert_eq!(file.add_generated(None, false, &entropy), Ok("k2".into()));
    assert_eq!(file.active, "k1", "not activated");
    assert!(file.add_generated(Some("k2"), true, &entropy).is_err());
    assert_ne!(file.keys[0].1.to_base64(), file.keys[1].1.to_base64());
}

#[test]
fn reserved_and_malformed_key_ids_are_refused() {
    for id in ["active", "clear", "", "k 1", "k/1", &"k".repeat(65)] {
        assert!(valid_key_id(id).is_err(), "{id:?} accepted");
    }
    for id in ["k1", "2026-12.prod_a", &"k".repeat(64)] {
        assert_eq!(valid_key_id(id), Ok(()), "{id:?} refused");
    }
}
