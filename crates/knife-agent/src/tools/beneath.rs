//! Race-free opens beneath the project root (SPEC.md SEC-03): every open starts
//! from a directory fd of the root and never lets the kernel follow a link by name.
//!
//! Reads try `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`
//! first; where the kernel lacks it (or refuses, e.g. for an absolute link that
//! points back inside the root) a component walk decides: each component is opened
//! with `O_NOFOLLOW` relative to the directory fd of the previous one, a symlink is
//! read (`readlinkat`) and its target resolved by the same walk, `..` pops back to the
//! parent fd and never above the root. A link swapped between two steps changes what
//! the next step sees, never where the walk is: it cannot leave the root. Writes use
//! the same walk to the parent directory and create the file there by name
//! (`O_CREAT | O_EXCL | O_NOFOLLOW` temp file, `renameat` over the name).
//!
//! Every result carries the path actually opened (root-relative), which the
//! permission rules are checked against.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Symlinks followed in one resolution before giving up (Linux's own limit).
const MAX_LINKS: usize = 40;
/// Times one component is retried when it changed kind between two syscalls (a
/// racing swapper); after that the open fails with an I/O error.
const MAX_RETRIES: usize = 8;

/// Why an open beneath the root failed.
#[derive(Debug)]
pub(crate) enum BeneathError {
    /// The path, or a link on it, leads outside the root.
    Outside,
    /// Nothing exists there.
    NotFound,
    /// A component that must be a directory is not one.
    NotADirectory,
    /// The path names a directory where a file was wanted.
    IsDirectory,
    /// More than [`MAX_LINKS`] links.
    Loop,
    /// A write's final component is a link to something that does not exist
    /// (writing would create its target); the link's text.
    Dangling(String),
    /// Any other failure of the filesystem.
    Io(io::Error),
}

impl From<Errno> for BeneathError {
    fn from(e: Errno) -> Self {
        BeneathError::Io(e.into())
    }
}

/// A file opened for reading beneath the root, with its real root-relative path.
pub(crate) struct OpenedFile {
    pub file: File,
    /// Where the file really is, relative to the root (links resolved).
    pub rel: PathBuf,
}

/// Where a write goes: the parent directory's fd and the final name in it, plus
/// what is there now.
pub(crate) struct WriteTarget {
    dir: OwnedFd,
    name: OsString,
    /// The real root-relative path of the file to write.
    pub rel: PathBuf,
    /// The file's permission bits when it exists (a regular file), else `None`.
    pub existing_mode: Option<u32>,
    /// The file's size when it exists.
    pub existing_len: Option<u64>,
}

/// What the walk is looking for at the end of the path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Goal {
    /// A file to read (opened `O_RDONLY | O_NONBLOCK`; the caller checks its kind).
    Read,
    /// The parent directory of a file to write, creating missing directories.
    Write,
}

enum Reached {
    File(OwnedFd),
    Dir(OwnedFd),
    Write(WriteTarget),
}

/// The root-relative form of `requested` (relative to `root`, or absolute under
/// `root`), or [`BeneathError::Outside`] for an absolute path elsewhere.
pub(crate) fn relative_to_root(root: &Path, requested: &Path) -> Result<PathBuf, BeneathError> {
    if requested.is_absolute() {
        requested
            .strip_prefix(root)
            .map(Path::to_path_buf)
            .map_err(|_| BeneathError::Outside)
    } else {
        Ok(requested.to_path_buf())
    }
}

fn open_root(root: &Path) -> Result<OwnedFd, BeneathError> {
    rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(BeneathError::from)
}

/// Opens `rel` (root-relative) for reading, beneath `root` (canonical).
pub(crate) fn open_read(root: &Path, rel: &Path) -> Result<OpenedFile, BeneathError> {
    let root_fd = open_root(root)?;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    if let Some(fd) = fast_open(&root_fd, rel, flags)
        && let Some(real) = real_rel(root, &fd)
    {
        return Ok(OpenedFile {
            file: File::from(fd),
            rel: real,
        });
    }
    match Walk::new(root, root_fd, rel).run(Goal::Read)? {
        (Reached::File(fd), real) | (Reached::Dir(fd), real) => Ok(OpenedFile {
            file: File::from(fd),
            rel: real,
        }),
        (Reached::Write(_), _) => Err(BeneathError::Io(io::Error::other("unexpected write"))),
    }
}

/// Resolves `rel` beneath `root` as a file to write: creates missing parent
/// directories, follows a final link that stays inside, refuses a directory.
pub(crate) fn write_target(root: &Path, rel: &Path) -> Result<WriteTarget, BeneathError> {
    let root_fd = open_root(root)?;
    match Walk::new(root, root_fd, rel).run(Goal::Write)? {
        (Reached::Write(target), _) => Ok(target),
        _ => Err(BeneathError::IsDirectory),
    }
}

impl WriteTarget {
    /// Writes `content` atomically: a new temp file in the target's directory
    /// (created exclusively, never through a link), flushed, given the old file's
    /// permissions, then renamed over the name. The rename replaces whatever the
    /// name is at that moment — a link swapped in is replaced, not followed.
    pub(crate) fn write_atomic(&self, content: &[u8]) -> io::Result<()> {
        use std::io::Write;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut tmp = OsString::from(".");
        tmp.push(&self.name);
        tmp.push(format!(
            ".knife-{}-{}.tmp",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let mode = Mode::from_raw_mode(self.existing_mode.unwrap_or(0o666));
        let fd = rustix::fs::openat(
            &self.dir,
            tmp.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
        )?;
        let result = (|| {
            let mut file = File::from(fd);
            file.write_all(content)?;
            if self.existing_mode.is_some() {
                // The umask applied at create; the old file's bits win.
                rustix::fs::fchmod(&file, mode)?;
            }
            file.sync_all()?;
            drop(file);
            rustix::fs::renameat(&self.dir, tmp.as_os_str(), &self.dir, self.name.as_os_str())?;
            Ok(())
        })();
        if result.is_err() {
            let _ = rustix::fs::unlinkat(&self.dir, tmp.as_os_str(), AtFlags::empty());
        }
        result
    }
}

/// `openat2` beneath the root; `None` when the kernel lacks it or refuses (the
/// walk then decides, with the same answer for every case openat2 would give).
fn fast_open(root_fd: &OwnedFd, rel: &Path, flags: OFlags) -> Option<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    rustix::fs::openat2(
        root_fd,
        rel,
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()
}

/// The real root-relative path of an open fd (`/proc/self/fd/N`), or `None` when
/// it cannot be read or is not under `root` (the walk then decides).
fn real_rel(root: &Path, fd: &OwnedFd) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    link.strip_prefix(root).ok().map(Path::to_path_buf)
}

/// The component walk.
struct Walk<'r> {
    root: &'r Path,
    root_fd: OwnedFd,
    /// Directories entered below the root, with their names.
    dirs: Vec<(OwnedFd, OsString)>,
    /// Components still to resolve, the next one last.
    pending: Vec<OsString>,
    links: usize,
}

impl<'r> Walk<'r> {
    fn new(root: &'r Path, root_fd: OwnedFd, rel: &Path) -> Self {
        let mut walk = Self {
            root,
            root_fd,
            dirs: Vec::new(),
            pending: Vec::new(),
            links: 0,
        };
        walk.push_path(rel);
        walk
    }

    fn top(&self) -> BorrowedFd<'_> {
        match self.dirs.last() {
            Some((fd, _)) => fd.as_fd(),
            None => self.root_fd.as_fd(),
        }
    }

    fn rel(&self) -> PathBuf {
        self.dirs.iter().map(|(_, name)| name.as_os_str()).collect()
    }

    /// Queues `path`'s components to be resolved before the ones queued already.
    fn push_path(&mut self, path: &Path) {
        let parts = path.components().rev().filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        });
        self.pending.extend(parts);
    }

    /// Continues at a link's target: relative to the link's directory, or, when
    /// absolute, from the root if it points inside it (else: outside).
    fn follow(&mut self, target: Vec<u8>) -> Result<(), BeneathError> {
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(BeneathError::Loop);
        }
        let target = PathBuf::from(OsString::from_vec(target));
        if target.is_absolute() {
            let rest = target
                .strip_prefix(self.root)
                .map_err(|_| BeneathError::Outside)?
                .to_path_buf();
            self.dirs.clear();
            self.push_path(&rest);
        } else {
            self.push_path(&target);
        }
        Ok(())
    }

    /// The target of the link `name` in the current directory; `Ok(None)` when it
    /// is not (or no longer) a link.
    fn read_link(&self, name: &OsStr) -> Result<Option<Vec<u8>>, BeneathError> {
        match rustix::fs::readlinkat(self.top(), name, Vec::new()) {
            Ok(target) => Ok(Some(target.into_bytes())),
            Err(Errno::INVAL) | Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn run(mut self, goal: Goal) -> Result<(Reached, PathBuf), BeneathError> {
        let mut retries = 0;
        // A write's missing directories: created only once the whole path is known
        // to stay inside (`new/../../x` creates nothing), then by `mkdirat` in order.
        let mut missing: Vec<OsString> = Vec::new();
        let mut creating = false;
        // The text of the link a write's final component was, once followed.
        let mut final_link: Option<String> = None;
        while let Some(name) = self.pending.pop() {
            if name == ".." {
                if missing.pop().is_none() && self.dirs.pop().is_none() {
                    return Err(BeneathError::Outside);
                }
                continue;
            }
            let last = self.pending.is_empty();
            if !missing.is_empty() {
                if let Some(link) = final_link.take() {
                    return Err(BeneathError::Dangling(link));
                }
                if last {
                    self.pending.push(name);
                    self.pending.extend(missing.drain(..).rev());
                    creating = true;
                } else {
                    missing.push(name);
                }
                continue;
            }
            let step = if !last {
                self.enter(&name, goal == Goal::Write, creating)?
            } else if goal == Goal::Read {
                self.open_file(&name)?
            } else {
                self.stat_final(&name)?
            };
            match step {
                Step::Entered(fd) => self.dirs.push((fd, name)),
                Step::Missing => missing.push(name),
                Step::Link(target) => {
                    if last && goal == Goal::Write && final_link.is_none() {
                        final_link = Some(String::from_utf8_lossy(&target).into_owned());
                    }
                    self.follow(target)?
                }
                Step::Done(Reached::Write(t)) if t.existing_mode.is_none() => {
                    if let Some(link) = final_link.take() {
                        return Err(BeneathError::Dangling(link));
                    }
                    return Ok((Reached::Write(t), PathBuf::new()));
                }
                Step::Retry => {
                    retries += 1;
                    if retries > MAX_RETRIES {
                        return Err(BeneathError::Io(io::Error::other(
                            "the path keeps changing while it is opened",
                        )));
                    }
                    self.pending.push(name);
                }
                Step::Done(reached) => {
                    let mut real = self.rel();
                    real.push(&name);
                    return Ok((reached, real));
                }
            }
        }
        // The path ended at a directory (the root, or after `..`).
        let real = self.rel();
        match goal {
            Goal::Read => {
                let fd = rustix::fs::openat(
                    self.top(),
                    ".",
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                Ok((Reached::Dir(fd), real))
            }
            Goal::Write => Err(BeneathError::IsDirectory),
        }
    }

    /// One directory component. Missing: [`BeneathError::NotFound`], or for a write
    /// (`write`) [`Step::Missing`], or once `create` it is made.
    fn enter(&self, name: &OsStr, write: bool, create: bool) -> Result<Step, BeneathError> {
        match rustix::fs::openat(
            self.top(),
            name,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Step::Entered(fd)),
            Err(Errno::NOTDIR) | Err(Errno::LOOP) => match self.read_link(name)? {
                Some(target) => Ok(Step::Link(target)),
                None if self.exists(name)? => Err(BeneathError::NotADirectory),
                None => Ok(Step::Retry),
            },
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(self.top(), name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => Ok(Step::Retry),
                    Err(e) => Err(e.into()),
                }
            }
            Err(Errno::NOENT) if write => Ok(Step::Missing),
            Err(Errno::NOENT) => Err(BeneathError::NotFound),
            Err(e) => Err(e.into()),
        }
    }

    /// The final component of a read.
    fn open_file(&self, name: &OsStr) -> Result<Step, BeneathError> {
        match rustix::fs::openat(
            self.top(),
            name,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Step::Done(Reached::File(fd))),
            Err(Errno::LOOP) => match self.read_link(name)? {
                Some(target) => Ok(Step::Link(target)),
                None => Ok(Step::Retry),
            },
            Err(Errno::NOENT) => Err(BeneathError::NotFound),
            Err(e) => Err(e.into()),
        }
    }

    /// The final component of a write: a link is followed, a directory refused,
    /// a regular file or nothing is the target.
    fn stat_final(&mut self, name: &OsStr) -> Result<Step, BeneathError> {
        let (existing_mode, existing_len) =
            match rustix::fs::statat(self.top(), name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                    FileType::Symlink => {
                        return match self.read_link(name)? {
                            Some(target) => Ok(Step::Link(target)),
                            None => Ok(Step::Retry),
                        };
                    }
                    FileType::Directory => return Err(BeneathError::IsDirectory),
                    _ => (Some(st.st_mode & 0o7777), u64::try_from(st.st_size).ok()),
                },
                Err(Errno::NOENT) => (None, None),
                Err(e) => return Err(e.into()),
            };
        let dir = match self.dirs.last() {
            Some((fd, _)) => fd.try_clone().map_err(BeneathError::Io)?,
            None => self.root_fd.try_clone().map_err(BeneathError::Io)?,
        };
        let mut rel = self.rel();
        rel.push(name);
        Ok(Step::Done(Reached::Write(WriteTarget {
            dir,
            name: name.to_owned(),
            rel,
            existing_mode,
            existing_len,
        })))
    }

    fn exists(&self, name: &OsStr) -> Result<bool, BeneathError> {
        match rustix::fs::statat(self.top(), name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

enum Step {
    Entered(OwnedFd),
    /// A directory of a write's path that does not exist yet.
    Missing,
    Link(Vec<u8>),
    Retry,
    Done(Reached),
}

/// `path` shown root-relative with `/` separators (`.` for the root).
pub(crate) fn shown(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        return ".".to_owned();
    }
    rel.components()
        .map(|c| String::from_utf8_lossy(c.as_os_str().as_bytes()).into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f.txt"), "inside").unwrap();
        std::fs::write(dir.path().join("secret"), "outside").unwrap();
        let root = std::fs::canonicalize(root).unwrap();
        (dir, root)
    }

    fn read(root: &Path, rel: &str) -> Result<(String, String), BeneathError> {
        let mut opened = open_read(root, Path::new(rel))?;
        let mut s = String::new();
        opened.file.read_to_string(&mut s).unwrap();
        Ok((s, shown(&opened.rel)))
    }

    fn walk_read(root: &Path, rel: &str) -> Result<(String, String), BeneathError> {
        let fd = open_root(root)?;
        match Walk::new(root, fd, Path::new(rel)).run(Goal::Read)? {
            (Reached::File(fd), real) => {
                let mut s = String::new();
                File::from(fd).read_to_string(&mut s).unwrap();
                Ok((s, shown(&real)))
            }
            _ => Err(BeneathError::IsDirectory),
        }
    }

    #[test]
    fn links_inside_are_followed_and_links_outside_refused_by_both_paths() {
        let (dir, root) = setup();
        symlink("a/b", root.join("rel")).unwrap();
        symlink(root.join("a/b/f.txt"), root.join("abs_in")).unwrap();
        symlink("../secret", root.join("up")).unwrap();
        symlink(dir.path().join("secret"), root.join("abs_out")).unwrap();
        symlink("/etc", root.join("etc")).unwrap();
        for f in [read, walk_read] {
            assert_eq!(
                f(&root, "rel/f.txt").unwrap(),
                ("inside".into(), "a/b/f.txt".into())
            );
            assert_eq!(f(&root, "abs_in").unwrap().1, "a/b/f.txt");
            assert_eq!(f(&root, "a/b/../b/f.txt").unwrap().1, "a/b/f.txt");
            for bad in ["up", "abs_out", "etc/passwd", "../secret", "a/../../secret"] {
                assert!(matches!(f(&root, bad), Err(BeneathError::Outside)), "{bad}");
            }
            assert!(matches!(f(&root, "nope"), Err(BeneathError::NotFound)));
        }
    }

    #[test]
    fn writes_create_parents_follow_inner_links_and_refuse_outer_ones() {
        let (dir, root) = setup();
        let t = write_target(&root, Path::new("new/dir/x.txt")).unwrap();
        t.write_atomic(b"hello").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("new/dir/x.txt")).unwrap(),
            "hello"
        );
        symlink("a/b/f.txt", root.join("to_f")).unwrap();
        let t = write_target(&root, Path::new("to_f")).unwrap();
        assert_eq!(shown(&t.rel), "a/b/f.txt");
        assert_eq!(t.existing_len, Some(6));
        t.write_atomic(b"changed").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("a/b/f.txt")).unwrap(),
            "changed"
        );
        assert!(root.join("to_f").is_symlink(), "the link itself stays");
        symlink(dir.path(), root.join("out")).unwrap();
        assert!(matches!(
            write_target(&root, Path::new("out/secret")),
            Err(BeneathError::Outside)
        ));
        assert!(matches!(
            write_target(&root, Path::new("out/newdir/x")),
            Err(BeneathError::Outside)
        ));
        assert!(!dir.path().join("newdir").exists());
        assert!(matches!(
            write_target(&root, Path::new("made/../../escape")),
            Err(BeneathError::Outside)
        ));
        assert!(
            !root.join("made").exists(),
            "nothing created for a path that leaves"
        );
        let t = write_target(&root, Path::new("m1/m2/../m3/x")).unwrap();
        assert_eq!(shown(&t.rel), "m1/m3/x");
        assert!(root.join("m1/m3").is_dir() && !root.join("m1/m2").exists());
        assert!(matches!(
            write_target(&root, Path::new("a")),
            Err(BeneathError::IsDirectory)
        ));
    }
}
