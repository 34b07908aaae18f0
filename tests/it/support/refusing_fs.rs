//! A FUSE passthrough file system for tests that can be turned read-only while files are open
//! for writing, which no kernel file system allows (a remount read-only fails with EBUSY then).
//! Mounted in the test process (`fuser`, pure Rust: no libfuse, no `fusermount` as root) over a
//! backing directory. While [`RefusingFs::set_read_only`] is on, every change is refused with
//! EROFS, as a file system forced read-only does: `write`, `fsync`, `ftruncate`/`chmod`/`chown`
//! (setattr), `create`, `mkdir`, `unlink`, `rmdir`, `rename`, opening for writing, `access(W_OK)`.
//! Reads go on. Turned off, it is a plain passthrough again.
//!
//! One exception, SQLite's `-shm` files: SQLite maps them shared (`mmap`) as the index of the
//! WAL that its connections share, not as data. On a file system gone read-only under a
//! running process, such a mapping stays writable (its pages are memory; the kernel only fails
//! to write them back), so here too writes and fsyncs of a `-shm` file pass through.
//!
//! POSIX locks are not forwarded (the INIT reply does not ask for them), so the kernel keeps
//! them itself, across processes, as SQLite needs. Files are opened with `FOPEN_KEEP_CACHE`:
//! every change goes through this mount, so the page cache never goes stale, and the shared
//! mapping of `-shm` is not dropped each time another connection opens it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    AccessFlags, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

/// How long the kernel may cache names and attributes. Every change goes through this mount,
/// so the kernel's copy stays right.
const TTL: Duration = Duration::from_secs(1);

/// The switch and the count of refused calls, shared with the test.
#[derive(Default)]
struct Switch {
    read_only: AtomicBool,
    refused: AtomicU64,
}

/// A mounted [`PassthroughFs`]: unmounted when dropped.
pub struct RefusingFs {
    pub mountpoint: PathBuf,
    switch: Arc<Switch>,
    session: Option<fuser::BackgroundSession>,
}

impl RefusingFs {
    /// Mounts a passthrough of `backing` on `mountpoint`, or says why it cannot (not root, no
    /// `/dev/fuse`, mount refused).
    pub fn mount(backing: &Path, mountpoint: &Path) -> Result<RefusingFs, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: cannot mount a FUSE file system".into());
        }
        if !Path::new("/dev/fuse").exists() {
            return Err("no /dev/fuse".into());
        }
        std::fs::create_dir_all(backing).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(mountpoint).map_err(|e| e.to_string())?;
        let switch = Arc::new(Switch::default());
        let fs = PassthroughFs {
            switch: switch.clone(),
            nodes: Mutex::new(Nodes::new(backing.to_path_buf())),
            files: Mutex::default(),
            next_fh: AtomicU64::new(1),
        };
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("portaria-refusing".into()),
            MountOption::DefaultPermissions,
        ];
        let session = fuser::spawn_mount(fs, mountpoint, &config)
            .map_err(|e| format!("cannot mount FUSE on {}: {e}", mountpoint.display()))?;
        Ok(RefusingFs {
            mountpoint: mountpoint.to_path_buf(),
            switch,
            session: Some(session),
        })
    }

    /// Turns refusing changes on or off.
    pub fn set_read_only(&self, on: bool) {
        self.switch.read_only.store(on, Ordering::SeqCst);
    }

    /// Calls refused with EROFS so far.
    pub fn refused(&self) -> u64 {
        self.switch.refused.load(Ordering::SeqCst)
    }
}

impl Drop for RefusingFs {
    fn drop(&mut self) {
        self.set_read_only(false);
        if let Some(session) = self.session.take()
            && session.umount_and_join().is_err()
            && let Ok(path) = std::ffi::CString::new(self.mountpoint.as_os_str().as_encoded_bytes())
        {
            // Still in use (a child not reaped): detach it, so the directory can go.
            // SAFETY: a valid C string; umount2 has no other preconditions.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// Mounts a [`RefusingFs`] under `dir`, or prints why this test is skipped and returns None.
/// With `PORTARIA_REQUIRE_FUSE=1` (CI: root, `/dev/fuse`), not being able to is a failure.
pub fn refusing_fs_or_skip(dir: &Path, test: &str) -> Option<RefusingFs> {
    match RefusingFs::mount(&dir.join("backing"), &dir.join("mnt")) {
        Ok(fs) => Some(fs),
        Err(why) => {
            assert!(
                std::env::var_os("PORTARIA_REQUIRE_FUSE").is_none_or(|v| v != "1"),
                "{test}: {why}, and PORTARIA_REQUIRE_FUSE=1 says it must run"
            );
            eprintln!(
                "SKIPPED {test}: {why} (run as root with /dev/fuse, as CI does, to test this)"
            );
            None
        }
    }
}

/// Inode numbers and the backing paths they stand for.
struct Nodes {
    paths: HashMap<u64, PathBuf>,
    inodes: HashMap<PathBuf, u64>,
    next: u64,
}

impl Nodes {
    fn new(root: PathBuf) -> Nodes {
        let mut nodes = Nodes {
            paths: HashMap::new(),
            inodes: HashMap::new(),
            next: INodeNo::ROOT.0 + 1,
        };
        nodes.paths.insert(INodeNo::ROOT.0, root.clone());
        nodes.inodes.insert(root, INodeNo::ROOT.0);
        nodes
    }

    fn path(&self, ino: INodeNo) -> Option<PathBuf> {
        self.paths.get(&ino.0).cloned()
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Option<PathBuf> {
        Some(self.paths.get(&parent.0)?.join(name))
    }

    fn inode(&mut self, path: &Path) -> u64 {
        if let Some(ino) = self.inodes.get(path) {
            return *ino;
        }
        let ino = self.next;
        self.next += 1;
        self.paths.insert(ino, path.to_path_buf());
        self.inodes.insert(path.to_path_buf(), ino);
        ino
    }

    fn forget_path(&mut self, path: &Path) {
        if let Some(ino) = self.inodes.remove(path) {
            self.paths.remove(&ino);
        }
    }
}

/// An open file: the backing file, and whether it is SQLite's shared-memory index.
struct Open {
    file: Arc<File>,
    shm: bool,
}

struct PassthroughFs {
    switch: Arc<Switch>,
    nodes: Mutex<Nodes>,
    files: Mutex<HashMap<u64, Open>>,
    next_fh: AtomicU64,
}

fn is_shm(path: &Path) -> bool {
    path.to_string_lossy().ends_with("-shm")
}

fn attr(ino: u64, meta: &std::fs::Metadata) -> FileAttr {
    let time = |secs: i64, nsecs: i64| {
        UNIX_EPOCH
            + Duration::from_secs(u64::try_from(secs).unwrap_or(0))
            + Duration::from_nanos(u64::try_from(nsecs).unwrap_or(0))
    };
    let kind = if meta.is_dir() {
        FileType::Directory
    } else if meta.file_type().is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    };
    FileAttr {
        ino: INodeNo(ino),
        size: meta.size(),
        blocks: meta.blocks(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: time(meta.ctime(), meta.ctime_nsec()),
        kind,
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: meta.blksize() as u32,
        flags: 0,
    }
}

impl PassthroughFs {
    /// True (and counted) when changes are refused now; `shm` files are exempt.
    fn refuses(&self, shm: bool) -> bool {
        let refused = !shm && self.switch.read_only.load(Ordering::SeqCst);
        if refused {
            self.switch.refused.fetch_add(1, Ordering::SeqCst);
        }
        refused
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.nodes.lock().unwrap().path(ino).ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        self.nodes
            .lock()
            .unwrap()
            .child(parent, name)
            .ok_or(Errno::ENOENT)
    }

    fn file(&self, fh: FileHandle) -> Result<(Arc<File>, bool), Errno> {
        let files = self.files.lock().unwrap();
        let open = files.get(&fh.0).ok_or(Errno::EBADF)?;
        Ok((open.file.clone(), open.shm))
    }

    fn entry(&self, path: &Path) -> Result<FileAttr, Errno> {
        let meta = std::fs::symlink_metadata(path).map_err(Errno::from)?;
        let ino = self.nodes.lock().unwrap().inode(path);
        Ok(attr(ino, &meta))
    }

    fn keep(&self, file: File, shm: bool) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::SeqCst);
        self.files.lock().unwrap().insert(
            fh,
            Open {
                file: Arc::new(file),
                shm,
            },
        );
        FileHandle(fh)
    }
}

fn open_options(flags: i32) -> OpenOptions {
    let mut options = OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => options.write(true),
        libc::O_RDWR => options.read(true).write(true),
        _ => options.read(true),
    };
    if flags & libc::O_APPEND != 0 {
        options.append(true);
    }
    if flags & libc::O_TRUNC != 0 {
        options.truncate(true);
    }
    options
}

fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

impl Filesystem for PassthroughFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name).and_then(|p| self.entry(&p)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        // An open file may have been unlinked: its handle still knows it.
        let by_handle = fh.and_then(|fh| self.file(fh).ok());
        let meta = match by_handle {
            Some((file, _)) => file.metadata().map_err(Errno::from),
            None => self
                .path(ino)
                .and_then(|p| std::fs::symlink_metadata(p).map_err(Errno::from)),
        };
        match meta {
            Ok(meta) => reply.attr(&TTL, &attr(ino.0, &meta)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = (|| {
            let path = self.path(ino)?;
            let handle = fh.and_then(|fh| self.file(fh).ok());
            let shm = handle
                .as_ref()
                .map_or_else(|| is_shm(&path), |(_, shm)| *shm);
            if self.refuses(shm) {
                return Err(Errno::EROFS);
            }
            if let Some(size) = size {
                match &handle {
                    Some((file, _)) => file.set_len(size),
                    None => OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .and_then(|f| f.set_len(size)),
                }
                .map_err(Errno::from)?;
            }
            if let Some(mode) = mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                    .map_err(Errno::from)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::chown(&path, uid, gid).map_err(Errno::from)?;
            }
            let meta = match &handle {
                Some((file, _)) => file.metadata(),
                None => std::fs::symlink_metadata(&path),
            }
            .map_err(Errno::from)?;
            Ok(attr(ino.0, &meta))
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let result = self.child(parent, name).and_then(|path| {
            if self.refuses(false) {
                return Err(Errno::EROFS);
            }
            std::fs::create_dir(&path).map_err(Errno::from)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & !umask))
                .map_err(Errno::from)?;
            self.entry(&path)
        });
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.child(parent, name).and_then(|path| {
            if self.refuses(false) {
                return Err(Errno::EROFS);
            }
            std::fs::remove_file(&path).map_err(Errno::from)?;
            self.nodes.lock().unwrap().forget_path(&path);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.child(parent, name).and_then(|path| {
            if self.refuses(false) {
                return Err(Errno::EROFS);
            }
            std::fs::remove_dir(&path).map_err(Errno::from)?;
            self.nodes.lock().unwrap().forget_path(&path);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = (|| {
            let (from, to) = (self.child(parent, name)?, self.child(newparent, newname)?);
            if self.refuses(false) {
                return Err(Errno::EROFS);
            }
            std::fs::rename(&from, &to).map_err(Errno::from)?;
            let mut nodes = self.nodes.lock().unwrap();
            nodes.forget_path(&to);
            if let Some(ino) = nodes.inodes.remove(&from) {
                nodes.paths.insert(ino, to.clone());
                nodes.inodes.insert(to, ino);
            }
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let result = self.path(ino).and_then(|path| {
            let shm = is_shm(&path);
            if writes(flags.0) && self.refuses(shm) {
                return Err(Errno::EROFS);
            }
            let file = open_options(flags.0).open(&path).map_err(Errno::from)?;
            Ok(self.keep(file, shm))
        });
        match result {
            Ok(fh) => reply.opened(fh, FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let result = self.file(fh).and_then(|(file, _)| {
            let mut buf = vec![0u8; size as usize];
            let mut filled = 0;
            while filled < buf.len() {
                match file.read_at(&mut buf[filled..], offset + filled as u64) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Errno::from(e)),
                }
            }
            buf.truncate(filled);
            Ok(buf)
        });
        match result {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = self.file(fh).and_then(|(file, shm)| {
            if self.refuses(shm) {
                return Err(Errno::EROFS);
            }
            file.write_all_at(data, offset).map_err(Errno::from)
        });
        match result {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.files.lock().unwrap().remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = self.file(fh).and_then(|(file, shm)| {
            if self.refuses(shm) {
                return Err(Errno::EROFS);
            }
            if datasync {
                file.sync_data()
            } else {
                file.sync_all()
            }
            .map_err(Errno::from)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.path(ino) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = self.path(ino).and_then(|dir| {
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".into()),
                (ino.0, FileType::Directory, "..".into()),
            ];
            for entry in std::fs::read_dir(&dir).map_err(Errno::from)? {
                let entry = entry.map_err(Errno::from)?;
                let kind = if entry.file_type().map_err(Errno::from)?.is_dir() {
                    FileType::Directory
                } else {
                    FileType::RegularFile
                };
                let child = self.nodes.lock().unwrap().inode(&entry.path());
                entries.push((child, kind, entry.file_name()));
            }
            Ok(entries)
        });
        match result {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(ino), (i + 1) as u64, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = self.path(ino).and_then(|dir| {
            if self.refuses(false) {
                return Err(Errno::EROFS);
            }
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(Errno::from)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let root = self.nodes.lock().unwrap().path(INodeNo::ROOT);
        let Some(root) =
            root.and_then(|r| std::ffi::CString::new(r.into_os_string().into_encoded_bytes()).ok())
        else {
            return reply.error(Errno::EIO);
        };
        // SAFETY: a zeroed statvfs is a valid out-parameter; the path is a valid C string.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(root.as_ptr(), &mut stat) } != 0 {
            return reply.error(Errno::from(std::io::Error::last_os_error()));
        }
        reply.statfs(
            stat.f_blocks,
            stat.f_bfree,
            stat.f_bavail,
            stat.f_files,
            stat.f_ffree,
            stat.f_bsize as u32,
            stat.f_namemax as u32,
            stat.f_frsize as u32,
        );
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let result = self.path(ino).and_then(|path| {
            std::fs::symlink_metadata(&path).map_err(Errno::from)?;
            if mask.contains(AccessFlags::W_OK) && self.refuses(is_shm(&path)) {
                return Err(Errno::EROFS);
            }
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = self.child(parent, name).and_then(|path| {
            let shm = is_shm(&path);
            if self.refuses(shm) {
                return Err(Errno::EROFS);
            }
            let mut options = open_options(flags);
            options.create(true).mode(mode & !umask);
            if flags & libc::O_ACCMODE == libc::O_RDONLY {
                // create needs write access to the backing file; the kernel checks the caller's.
                options.write(true);
            }
            if flags & libc::O_EXCL != 0 {
                options.create_new(true);
            }
            let file = options.open(&path).map_err(Errno::from)?;
            let attr = self.entry(&path)?;
            Ok((attr, self.keep(file, shm)))
        });
        match result {
            Ok((attr, fh)) => {
                reply.created(&TTL, &attr, Generation(0), fh, FopenFlags::FOPEN_KEEP_CACHE)
            }
            Err(e) => reply.error(e),
        }
    }
}
