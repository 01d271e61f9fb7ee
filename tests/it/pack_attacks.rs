//! Packs made by an attacker, through the real binary: a symbolic link, `../` and absolute
//! paths, a pax header, a duplicate path, too many entries, an entry whose header claims a
//! terabyte. Each is refused by `gym pack verify` and `gym pack import` with what is wrong, and
//! nothing is written anywhere.

use crate::common::{Scratch, snapshot_tree};

/// A ustar header for `name` (written into the field as raw bytes, so no check of the tar
/// crate's stands between the attacker and the reader), of type `kind`, claiming `size` bytes.
fn header(name: &[u8], kind: tar::EntryType, size: u64) -> tar::Header {
    let mut header = tar::Header::new_ustar();
    let field = &mut header.as_ustar_mut().unwrap().name;
    field[..name.len()].copy_from_slice(name);
    header.set_size(size);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_entry_type(kind);
    header.set_cksum();
    header
}

/// An archive of (name, kind, content) entries.
fn archive(entries: &[(&[u8], tar::EntryType, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, kind, bytes) in entries {
        builder
            .append(&header(name, *kind, bytes.len() as u64), *bytes)
            .unwrap();
    }
    builder.into_inner().unwrap()
}

const FILE: tar::EntryType = tar::EntryType::Regular;

/// Runs verify and import on `bytes`; both must fail saying `expected`, and no file may
/// appear or change in the scratch directory (outside the pack itself).
fn refused(scratch: &Scratch, bytes: &[u8], expected: &str) {
    let pack = scratch.dir.path().join("evil.pack");
    std::fs::write(&pack, bytes).unwrap();
    let before = snapshot_tree(scratch.dir.path());
    for args in [
        vec!["pack", "verify", "evil.pack"],
        vec!["pack", "import", "evil.pack", "--as", "evil"],
    ] {
        let error = scratch.fails(&args);
        assert!(
            error.contains(expected),
            "{args:?}: expected {expected:?} in:\n{error}"
        );
    }
    assert_eq!(
        snapshot_tree(scratch.dir.path()),
        before,
        "nothing was written"
    );
    assert!(
        !scratch
            .dir
            .path()
            .parent()
            .unwrap()
            .join("escaped")
            .exists()
    );
}

#[test]
fn links_traversal_absolute_paths_and_extension_headers_are_refused() {
    let scratch = Scratch::new();
    scratch.ok(&["library", "init", "kept"]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            archive(&[
                (b"receipt.json", FILE, b"{}"),
                (
                    b"library/versions/000001.json",
                    tar::EntryType::Symlink,
                    b"",
                ),
            ]),
            "`library/versions/000001.json`: refused: a symbolic link",
        ),
        (
            archive(&[(b"library/x", tar::EntryType::Link, b"")]),
            "refused: a hard link",
        ),
        (
            archive(&[(b"../escaped", FILE, b"x")]),
            "`../escaped`: refused: a `.` or `..` path component",
        ),
        (
            archive(&[(b"library/../../escaped", FILE, b"x")]),
            "refused: a `.` or `..` path component",
        ),
        (
            archive(&[(b"/tmp/escaped", FILE, b"x")]),
            "`/tmp/escaped`: refused: an absolute path",
        ),
        (
            archive(&[(b"library", tar::EntryType::Directory, b"")]),
            "refused: a directory",
        ),
        (
            archive(&[(b"pax", tar::EntryType::XHeader, b"13 path=/etc\n")]),
            "refused: a pax extension header",
        ),
        (
            archive(&[
                (b"receipt.json", FILE, b"{}"),
                (b"receipt.json", FILE, b"{}"),
            ]),
            "`receipt.json`: refused: the path appears twice",
        ),
    ];
    for (bytes, expected) in cases {
        refused(&scratch, &bytes, expected);
    }
}

#[test]
fn too_many_entries_and_huge_entries_are_refused_before_they_are_read() {
    let scratch = Scratch::new();
    // 10,001 empty files: one over the limit.
    let names: Vec<String> = (0..10_001).map(|i| format!("f{i}")).collect();
    let entries: Vec<(&[u8], tar::EntryType, &[u8])> = names
        .iter()
        .map(|n| (n.as_bytes(), FILE, &b""[..]))
        .collect();
    refused(&scratch, &archive(&entries), "more than 10000 entries");

    // A header that claims a terabyte, followed by a few bytes: refused on the claim.
    let mut bytes = header(b"results/eval.json", FILE, 1 << 40)
        .as_bytes()
        .to_vec();
    bytes.extend_from_slice(&[b'x'; 512]);
    refused(
        &scratch,
        &bytes,
        "`results/eval.json` is 1099511627776 bytes, over the limit",
    );

    // A file larger than any pack may be is refused from its size alone.
    let file = std::fs::File::create(scratch.dir.path().join("evil.pack")).unwrap();
    file.set_len(300 << 20).unwrap();
    drop(file);
    let error = scratch.fails(&["pack", "verify", "evil.pack"]);
    assert!(
        error.contains("refused: 314572800 bytes is over"),
        "{error}"
    );
}
