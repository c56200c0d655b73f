//! The entries of a tar read from outside (an image layer, a save stream),
//! with what the tar crate reads whole into memory bounded.
//!
//! The `tar` crate (0.4) reads a PAX extended header, and a GNU long name
//! or long link name entry, whole into memory before the entry it
//! describes, and a GNU sparse entry's map block by block — as large as
//! the header says: a layer of a few kilobytes of gzip could make it
//! allocate gigabytes. Its raw mode shows those entries before they are
//! read, but then the archive is walked by each header's own size field,
//! not by the PAX `size` that overrides it, and PAX's path, link and ids
//! are ours to apply: a second tar parser that can disagree with the first
//! (disagreeing parsers are how a layer shows one thing to a scanner and
//! another to the runtime). So the crate keeps parsing, and every byte it
//! reads passes through [`Guarded`], which reads each header block before
//! the crate does, where the crate will look for it — the start of the
//! archive, then after each entry the crate returned (its data position
//! plus its size, padded) — and refuses an extension header over its cap
//! before a byte of its body is read.
//!
//! The caps: 1 MiB of PAX records (Go's `archive/tar` limit, which the
//! engines' own readers apply), 64 KiB for a long name or link name
//! (Linux's `PATH_MAX` is 4 KiB) and for a sparse map. A GNU sparse entry
//! ends the walk: its data position is not where the crate's accounting
//! puts it, and no engine writes one (the normaliser refuses them).

use std::cell::RefCell;
use std::io::{self, Read};
use std::rc::Rc;

const BLOCK: u64 = 512;

/// The most bytes of PAX records one entry may have.
pub(crate) const PAX_CAP: u64 = 1 << 20;
/// The longest GNU long name or long link name.
pub(crate) const NAME_CAP: u64 = 64 << 10;
/// The most bytes of GNU sparse map extension blocks.
pub(crate) const SPARSE_MAP_CAP: u64 = 64 << 10;

/// A header the crate would read into memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderKind {
    Pax,
    LongName,
    LongLink,
    SparseMap,
}

impl HeaderKind {
    fn cap(self) -> u64 {
        match self {
            HeaderKind::Pax => PAX_CAP,
            HeaderKind::LongName | HeaderKind::LongLink => NAME_CAP,
            HeaderKind::SparseMap => SPARSE_MAP_CAP,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            HeaderKind::Pax => "the PAX extended header",
            HeaderKind::LongName => "the GNU long name header",
            HeaderKind::LongLink => "the GNU long link name header",
            HeaderKind::SparseMap => "the GNU sparse map of",
        }
    }
}

/// An extension header larger than its cap, found before its body was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Oversized {
    pub(crate) kind: HeaderKind,
    /// The header block's own name field (`././@LongLink`,
    /// `PaxHeaders.0/…`), escaped for printing.
    pub(crate) name: String,
    /// Where the header block starts in the tar.
    pub(crate) at: u64,
    /// The bytes it declares (for a sparse map: the extension blocks so far).
    pub(crate) size: u64,
    pub(crate) cap: u64,
    /// The number of the entry it comes before (1: the first).
    pub(crate) entry: u64,
    /// The path of the entry before it, escaped.
    pub(crate) after: Option<String>,
}

impl Oversized {
    /// Which header, where and before which entry: the message without
    /// the sizes.
    pub(crate) fn header(&self) -> String {
        let after = match &self.after {
            Some(after) => format!(", after `{after}`"),
            None => String::new(),
        };
        let name = if self.name.is_empty() {
            String::new()
        } else {
            format!(" `{}`", self.name)
        };
        format!(
            "{}{name} at byte {} (entry {}{after})",
            self.kind.describe(),
            self.at,
            self.entry
        )
    }
}

impl std::fmt::Display for Oversized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} declares {} bytes, over the cap of {} bytes",
            self.header(),
            self.size,
            self.cap
        )
    }
}

impl std::error::Error for Oversized {}

/// The [`Oversized`] header an error of [`Entries`] is about, if it is.
pub(crate) fn oversized(e: &io::Error) -> Option<&Oversized> {
    e.get_ref()?.downcast_ref::<Oversized>()
}

/// A tar path or name (or a message quoting one) as text for a message:
/// lossy UTF-8, control characters escaped (a hostile name cannot move a
/// terminal's cursor).
pub(crate) fn shown(bytes: impl AsRef<[u8]>) -> String {
    String::from_utf8_lossy(bytes.as_ref())
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// What the guard looks at next.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A header block: an extension header, or the entry's own.
    Header,
    /// A GNU sparse map extension block, `seen` bytes of them before it.
    SparseMap { seen: u64 },
}

#[derive(Debug, Default)]
struct Watch {
    /// Where the next block to inspect starts, and what it is; `None`
    /// while the caller reads an entry's data.
    next: Option<(u64, Expect)>,
    tripped: Option<Oversized>,
}

/// The reader the tar crate reads through (see the module doc).
pub(crate) struct Guarded<R> {
    inner: R,
    /// Bytes given to the crate so far: its own position in the archive.
    pos: u64,
    block: [u8; BLOCK as usize],
    filled: usize,
    served: usize,
    watch: Rc<RefCell<Watch>>,
}

impl<R: Read> Read for Guarded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.served < self.filled {
            let n = buf.len().min(self.filled - self.served);
            buf[..n].copy_from_slice(&self.block[self.served..self.served + n]);
            self.served += n;
            self.pos += n as u64;
            return Ok(n);
        }
        let next = self.watch.borrow().next;
        let limit = match next {
            Some((at, expect)) if at == self.pos => {
                self.inspect_block(at, expect)?;
                if self.filled == 0 {
                    return Ok(0);
                }
                return self.read(buf);
            }
            Some((at, _)) if at > self.pos => usize::try_from(at - self.pos).unwrap_or(usize::MAX),
            Some((at, _)) => {
                return Err(io::Error::other(format!(
                    "the tar walk lost its place (a header expected at byte {at}, already at {})",
                    self.pos
                )));
            }
            None => usize::MAX,
        };
        let want = buf.len().min(limit);
        let n = self.inner.read(&mut buf[..want])?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Read> Guarded<R> {
    /// Reads the block at `at` (the current position) into `self.block`
    /// and decides from it what comes next, or refuses it.
    fn inspect_block(&mut self, at: u64, expect: Expect) -> io::Result<()> {
        self.served = 0;
        self.filled = 0;
        while self.filled < self.block.len() {
            match self.inner.read(&mut self.block[self.filled..]) {
                Ok(0) => break,
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let mut watch = self.watch.borrow_mut();
        watch.next = None;
        // A short block, or the end-of-archive zeros: the crate's to judge.
        if self.filled < self.block.len() || self.block.iter().all(|b| *b == 0) {
            return Ok(());
        }
        let next = at + BLOCK;
        match expect {
            Expect::SparseMap { seen } => {
                let seen = seen + BLOCK;
                if seen > SPARSE_MAP_CAP {
                    return Err(self.trip(&mut watch, HeaderKind::SparseMap, at, seen));
                }
                // `isextended`, after the 21 sparse records of 24 bytes.
                if self.block[504] != 0 {
                    watch.next = Some((next, Expect::SparseMap { seen }));
                }
            }
            Expect::Header => {
                let header = tar::Header::from_byte_slice(&self.block);
                if !checksum_ok(&self.block) {
                    // The crate refuses it, naming the checksum.
                    return Ok(());
                }
                let entry_type = header.entry_type();
                let kind = if entry_type.is_pax_local_extensions() {
                    Some(HeaderKind::Pax)
                } else if entry_type.is_gnu_longname() {
                    Some(HeaderKind::LongName)
                } else if entry_type.is_gnu_longlink() {
                    Some(HeaderKind::LongLink)
                } else {
                    None
                };
                match kind {
                    Some(kind) => {
                        let Ok(size) = header.entry_size() else {
                            return Ok(());
                        };
                        if size > kind.cap() {
                            return Err(self.trip(&mut watch, kind, at, size));
                        }
                        watch.next = Some((next + padded(size), Expect::Header));
                    }
                    None if entry_type.is_gnu_sparse()
                        && header.as_gnu().is_some_and(|g| g.is_extended()) =>
                    {
                        watch.next = Some((next, Expect::SparseMap { seen: 0 }));
                    }
                    // The entry's own header: the caller reads its data.
                    None => {}
                }
            }
        }
        Ok(())
    }

    fn trip(&self, watch: &mut Watch, kind: HeaderKind, at: u64, size: u64) -> io::Error {
        let header = tar::Header::from_byte_slice(&self.block);
        let oversized = Oversized {
            kind,
            name: shown(header.path_bytes()),
            at,
            size,
            cap: kind.cap(),
            entry: 0,
            after: None,
        };
        watch.tripped = Some(oversized.clone());
        io::Error::other(oversized)
    }
}

fn checksum_ok(block: &[u8; BLOCK as usize]) -> bool {
    let header = tar::Header::from_byte_slice(block);
    let sum = block[..148]
        .iter()
        .chain(&block[156..])
        .fold(0u32, |a, b| a + u32::from(*b))
        + 8 * 32;
    header.cksum().is_ok_and(|c| c == sum)
}

fn padded(n: u64) -> u64 {
    n.div_ceil(BLOCK).saturating_mul(BLOCK)
}

/// Why a layer blob is not read as a tar.
#[derive(Debug)]
pub(crate) enum NotATar {
    /// Its first bytes could not be read.
    Io(io::Error),
    /// It is zstd-compressed ([`ZSTD_REFUSED`]).
    Zstd,
}

/// What is said of a zstd-compressed layer.
pub(crate) const ZSTD_REFUSED: &str = "it is zstd-compressed, and zstd layers are not read";

/// A layer blob as the runtime reads it: a tar, or a gzip-compressed one
/// (every member, as Go's reader takes them), told by its first bytes;
/// zstd is refused.
pub(crate) fn layer_tar<'a>(input: impl Read + 'a) -> Result<Box<dyn Read + 'a>, NotATar> {
    let mut input = io::BufReader::with_capacity(64 << 10, input);
    let head = io::BufRead::fill_buf(&mut input).map_err(NotATar::Io)?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(flate2::bufread::MultiGzDecoder::new(input)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Err(NotATar::Zstd)
    } else {
        Ok(Box::new(input))
    }
}

/// A tar read from outside: [`tar::Archive`] with its headers bounded.
pub(crate) struct BoundedTar<R: Read> {
    archive: tar::Archive<Guarded<R>>,
    watch: Rc<RefCell<Watch>>,
}

impl<R: Read> BoundedTar<R> {
    pub(crate) fn new(input: R) -> BoundedTar<R> {
        let watch = Rc::new(RefCell::new(Watch::default()));
        BoundedTar {
            archive: tar::Archive::new(Guarded {
                inner: input,
                pos: 0,
                block: [0; BLOCK as usize],
                filled: 0,
                served: 0,
                watch: watch.clone(),
            }),
            watch,
        }
    }

    /// The entries, in order, as [`tar::Archive::entries`] gives them.
    pub(crate) fn entries(&mut self) -> io::Result<Entries<'_, R>> {
        Ok(Entries {
            inner: self.archive.entries()?,
            watch: self.watch.clone(),
            next_header: 0,
            count: 0,
            previous: None,
            after_sparse: None,
            done: false,
        })
    }
}

/// One entry of a [`BoundedTar`].
pub(crate) type Entry<'a, R> = tar::Entry<'a, Guarded<R>>;

/// The entries of a [`BoundedTar`]; an oversized header is an error
/// carrying an [`Oversized`] (see [`oversized`]), and ends the walk.
pub(crate) struct Entries<'a, R: Read> {
    inner: tar::Entries<'a, Guarded<R>>,
    watch: Rc<RefCell<Watch>>,
    /// Where the crate looks for the next header.
    next_header: u64,
    count: u64,
    previous: Option<String>,
    /// The path of a GNU sparse entry just returned.
    after_sparse: Option<String>,
    done: bool,
}

impl<'a, R: Read> Iterator for Entries<'a, R> {
    type Item = io::Result<Entry<'a, R>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Some(path) = self.after_sparse.take() {
            self.done = true;
            return Some(Err(io::Error::other(format!(
                "entry `{path}` is a GNU sparse file; what follows it is not read"
            ))));
        }
        self.watch.borrow_mut().next = Some((self.next_header, Expect::Header));
        let item = self.inner.next();
        let tripped = {
            let mut watch = self.watch.borrow_mut();
            watch.next = None;
            watch.tripped.take()
        };
        match item {
            None => {
                self.done = true;
                None
            }
            Some(Err(e)) => {
                self.done = true;
                Some(Err(match tripped {
                    Some(mut o) => {
                        o.entry = self.count + 1;
                        o.after = self.previous.clone();
                        io::Error::other(o)
                    }
                    None => e,
                }))
            }
            Some(Ok(entry)) => {
                self.count += 1;
                let path = shown(entry.path_bytes());
                if entry.header().entry_type().is_gnu_sparse() {
                    self.after_sparse = Some(path.clone());
                } else {
                    self.next_header = entry
                        .raw_file_position()
                        .saturating_add(padded(entry.size()));
                }
                self.previous = Some(path);
                Some(Ok(entry))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header block of `kind` declaring `size` bytes, named `name`.
    fn header(name: &str, kind: tar::EntryType, size: u64) -> Vec<u8> {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o644);
        h.set_cksum();
        h.as_bytes().to_vec()
    }

    fn file(name: &str, data: &[u8]) -> Vec<u8> {
        let mut out = header(name, tar::EntryType::Regular, data.len() as u64);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
        out
    }

    /// `records` as a PAX extended header block and its body.
    fn pax(records: &[(&str, &str)]) -> Vec<u8> {
        let body: Vec<u8> = records
            .iter()
            .flat_map(|(k, v)| {
                let rest = k.len() + v.len() + 3;
                let mut len = rest + 1;
                while rest + len.to_string().len() != len {
                    len = rest + len.to_string().len();
                }
                format!("{len} {k}={v}\n").into_bytes()
            })
            .collect();
        let mut out = header("PaxHeaders.0/x", tar::EntryType::XHeader, body.len() as u64);
        out.extend_from_slice(&body);
        out.resize(out.len().div_ceil(512) * 512, 0);
        out
    }

    fn end() -> Vec<u8> {
        vec![0; 1024]
    }

    /// Every entry: path, link name and data; or the error that ended it.
    fn walk(input: impl Read) -> Result<Vec<(String, String, Vec<u8>)>, io::Error> {
        let mut tar = BoundedTar::new(input);
        let mut out = Vec::new();
        for e in tar.entries()? {
            let mut e = e?;
            let mut data = Vec::new();
            e.read_to_end(&mut data)?;
            let link = e
                .link_name_bytes()
                .map(|l| String::from_utf8_lossy(&l).into_owned())
                .unwrap_or_default();
            out.push((
                String::from_utf8_lossy(&e.path_bytes()).into_owned(),
                link,
                data,
            ));
        }
        Ok(out)
    }

    /// A source of `len` bytes that counts what was read from it, and
    /// fails past `fail_after` bytes (the test's own bound on memory).
    struct Counted {
        prefix: Vec<u8>,
        len: u64,
        read: Rc<std::cell::Cell<u64>>,
        fail_after: u64,
    }

    impl Read for Counted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let at = self.read.get();
            if at >= self.fail_after {
                return Err(io::Error::other("the test's source was read too far"));
            }
            if at >= self.len {
                return Ok(0);
            }
            let n = (buf.len() as u64)
                .min(self.len - at)
                .min(self.fail_after - at) as usize;
            for (i, b) in buf[..n].iter_mut().enumerate() {
                let p = at as usize + i;
                *b = self.prefix.get(p).copied().unwrap_or(b'a');
            }
            self.read.set(at + n as u64);
            Ok(n)
        }
    }

    #[test]
    fn a_pax_header_declaring_a_gibibyte_is_refused_before_its_body_is_read() {
        let mut prefix = file("first", b"one");
        prefix.extend(header("PaxHeaders.0/big", tar::EntryType::XHeader, 1 << 30));
        let read = Rc::new(std::cell::Cell::new(0));
        let source = Counted {
            prefix,
            len: 2048 + (1 << 30),
            read: read.clone(),
            fail_after: 4 << 20,
        };
        let err = walk(source).unwrap_err();
        let o = oversized(&err).unwrap_or_else(|| panic!("not an Oversized: {err}"));
        assert_eq!(o.kind, HeaderKind::Pax);
        assert_eq!((o.size, o.cap, o.at, o.entry), (1 << 30, PAX_CAP, 1024, 2));
        assert_eq!(o.after.as_deref(), Some("first"));
        assert_eq!(
            err.to_string(),
            "the PAX extended header `PaxHeaders.0/big` at byte 1024 (entry 2, after `first`) \
             declares 1073741824 bytes, over the cap of 1048576 bytes"
        );
        assert!(
            read.get() <= 1536,
            "read {} bytes of the source",
            read.get()
        );
    }

    #[test]
    fn long_names_and_links_over_the_cap_are_refused_and_under_it_read() {
        for (kind, what) in [
            (tar::EntryType::GNULongName, HeaderKind::LongName),
            (tar::EntryType::GNULongLink, HeaderKind::LongLink),
        ] {
            let mut tar = header("././@LongLink", kind, NAME_CAP + 1);
            tar.extend(vec![b'n'; padded(NAME_CAP + 1) as usize]);
            tar.extend(file("x", b""));
            tar.extend(end());
            let err = walk(tar.as_slice()).unwrap_err();
            let o = oversized(&err).unwrap();
            assert_eq!((o.kind, o.size, o.entry), (what, NAME_CAP + 1, 1));
            assert_eq!(o.after, None);
            assert!(
                err.to_string()
                    .contains("`././@LongLink` at byte 0 (entry 1)")
            );
        }
        // A long name of 300 bytes, as `tar` writes one, reads.
        let name = format!("{}f", "d/".repeat(150));
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(2);
        h.set_cksum();
        b.append_data(&mut h, &name, &b"hi"[..]).unwrap();
        let entries = walk(b.into_inner().unwrap().as_slice()).unwrap();
        assert_eq!(entries, [(name, String::new(), b"hi".to_vec())]);
    }

    #[test]
    fn a_pax_size_that_overrides_the_header_is_followed_to_the_next_entry() {
        // The ustar size field says 0, PAX says 700 (as a writer does for a
        // file over 8 GiB): the next header is after 700 bytes, padded.
        let mut tar = pax(&[("size", "700"), ("path", "long/name")]);
        let mut h = header("short", tar::EntryType::Regular, 0);
        tar.append(&mut h);
        tar.extend(vec![b'z'; 1024]);
        tar.extend(pax(&[("linkpath", "target")]));
        tar.extend(header("link", tar::EntryType::Symlink, 0));
        tar.extend(end());
        let entries = walk(tar.as_slice()).unwrap();
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert_eq!(entries[0].0, "long/name");
        assert_eq!(entries[0].2, vec![b'z'; 700]);
        assert_eq!(entries[1].0, "link");
        assert_eq!(entries[1].1, "target");
    }

    #[test]
    fn unread_entries_are_skipped_and_the_next_header_still_inspected() {
        let mut tar = file("big", &[b'b'; 5000]);
        tar.extend(header(
            "PaxHeaders.0/y",
            tar::EntryType::XHeader,
            PAX_CAP + 1,
        ));
        tar.extend(end());
        let mut archive = BoundedTar::new(tar.as_slice());
        let mut entries = archive.entries().unwrap();
        // The first entry's data is never read: the crate skips it.
        let first = entries.next().unwrap().unwrap();
        assert_eq!(first.size(), 5000);
        drop(first);
        let Some(Err(err)) = entries.next() else {
            panic!("the second header is not refused");
        };
        assert_eq!(oversized(&err).unwrap().at, padded(5000) + 512);
        assert!(entries.next().is_none(), "the walk ends at the error");
    }

    #[test]
    fn a_sparse_map_over_its_cap_is_refused() {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..6].copy_from_slice(b"sparse");
        h.set_entry_type(tar::EntryType::GNUSparse);
        h.set_size(0);
        h.set_mode(0o644);
        h.as_gnu_mut().unwrap().isextended[0] = 1;
        h.set_cksum();
        let mut tar = h.as_bytes().to_vec();
        let mut ext = [0u8; 512];
        ext[504] = 1;
        for _ in 0..(SPARSE_MAP_CAP / 512 + 1) {
            tar.extend_from_slice(&ext);
        }
        tar.extend(end());
        let err = walk(tar.as_slice()).unwrap_err();
        let o = oversized(&err).unwrap();
        assert_eq!(o.kind, HeaderKind::SparseMap);
        assert_eq!(o.size, SPARSE_MAP_CAP + 512);
    }

    #[test]
    fn names_in_messages_have_control_characters_escaped() {
        assert_eq!(shown(b"a\x1b[2Jb\n"), "a\\u{1b}[2Jb\\n");
        assert_eq!(shown(b"caf\xc3\xa9"), "café");
    }
}
