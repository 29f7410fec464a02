//! A FUSE filesystem that can lose power: every change is kept in memory and
//! becomes durable only when the broker syncs it, the way a disk with a
//! volatile write cache behaves.
//!
//! * A file's bytes and size become durable with an `fsync` of that file.
//! * A directory's entries (files created, renamed, removed in it) become
//!   durable with an `fsync` of that directory (POSIX asks for both).
//! * [`PowerLossDisk::cut_power`] stops everything: later writes and syncs
//!   are ignored. [`PowerLossDisk::restore_power`] then throws away whatever
//!   was never synced, and the next mount sees only what survived.
//!
//! `kill -9` keeps the page cache; this does not. The mount is unmounted
//! between the cut and the next start, so the kernel's cache of the old
//! contents is gone too (what it writes back while unmounting arrives after
//! the cut and is dropped).
//!
//! The broker must run with `sync_method = fsync`: `syncfs` never reaches a
//! FUSE daemon (the kernel only forwards it to virtiofs), so with it this
//! filesystem would see no sync at all.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};

const ROOT: u64 = fuser::FUSE_ROOT_ID;
const TTL: Duration = Duration::from_secs(1);
const BLOCK: u64 = 4096;

/// One inode, with what it holds now and what a power loss would leave of it.
#[derive(Debug, Clone)]
struct Node {
    kind: FileType,
    perm: u16,
    data: Vec<u8>,
    durable_data: Vec<u8>,
    /// Bytes changed since the last fsync (a range: writes are appends and
    /// page write-backs near the end of a file).
    dirty: Option<(usize, usize)>,
    children: BTreeMap<OsString, u64>,
    durable_children: BTreeMap<OsString, u64>,
}

impl Node {
    fn new(kind: FileType, perm: u16) -> Node {
        Node {
            kind,
            perm,
            data: Vec::new(),
            durable_data: Vec::new(),
            dirty: None,
            children: BTreeMap::new(),
            durable_children: BTreeMap::new(),
        }
    }

    fn mark_dirty(&mut self, from: usize, to: usize) {
        self.dirty = Some(match self.dirty {
            Some((a, b)) => (a.min(from), b.max(to)),
            None => (from, to),
        });
    }

    fn resize(&mut self, len: usize) {
        let old = self.data.len();
        self.data.resize(len, 0);
        self.mark_dirty(old.min(len), old.max(len));
    }

    /// What `fsync` promises: the file as it is now survives a power loss.
    fn sync(&mut self) {
        self.durable_data.resize(self.data.len(), 0);
        if let Some((from, to)) = self.dirty.take() {
            let to = to.min(self.data.len());
            if from < to {
                self.durable_data[from..to].copy_from_slice(&self.data[from..to]);
            }
        }
        self.durable_children = self.children.clone();
    }

    /// A power loss: back to the last sync.
    fn revert(&mut self) {
        self.data = self.durable_data.clone();
        self.children = self.durable_children.clone();
        self.dirty = None;
    }
}

#[derive(Debug)]
struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    powered: bool,
    /// Syncs the daemon answered while powered: a trial that saw none proves nothing.
    syncs: u64,
    /// How long each sync takes, as on a slow disk: it widens the window in
    /// which a reply sent too early would be caught.
    sync_delay: Duration,
}

/// The disk behind the mounts: it outlives each mount, as a disk outlives
/// the machine's power.
#[derive(Clone)]
pub struct PowerLossDisk {
    tree: Arc<Mutex<Tree>>,
}

/// A mounted [`PowerLossDisk`]; unmounted on drop.
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
    path: PathBuf,
}

impl Mounted {
    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else { return };
        // Not `BackgroundSession::join`: it unwraps how the session loop ended,
        // and at unmount a read of /dev/fuse sometimes fails with ECONNABORTED
        // rather than ENODEV, which fuser reports as an error although the
        // mount is gone all the same. Dropping the rest of the session
        // unmounts; the thread is then waited for, so that no late request
        // reaches the disk after this returns.
        let guard = {
            // `session` moves in here, so the fields left in it (the mount
            // among them) are dropped at the end of this block.
            let session = session;
            let fuser::BackgroundSession { guard, .. } = session;
            guard
        };
        match guard.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
            Ok(Err(e)) => panic!("the power-loss filesystem's session failed: {e}"),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl PowerLossDisk {
    /// An empty disk, powered, whose syncs each take `sync_delay`.
    pub fn new(sync_delay: Duration) -> PowerLossDisk {
        let mut nodes = HashMap::new();
        nodes.insert(ROOT, Node::new(FileType::Directory, 0o755));
        PowerLossDisk {
            tree: Arc::new(Mutex::new(Tree {
                nodes,
                next_ino: ROOT + 1,
                powered: true,
                syncs: 0,
                sync_delay,
            })),
        }
    }

    /// True when this machine can mount FUSE filesystems.
    pub fn available() -> bool {
        Path::new("/dev/fuse").exists()
    }

    /// Mounts the disk at `path` (an empty directory).
    pub fn mount(&self, path: &Path) -> Mounted {
        let fs = Daemon {
            tree: self.tree.clone(),
        };
        let options = [MountOption::FSName("powerloss".into()), MountOption::DefaultPermissions];
        let session = fuser::spawn_mount2(fs, path, &options)
            .unwrap_or_else(|e| panic!("cannot mount the power-loss filesystem at {}: {e}", path.display()));
        Mounted {
            session: Some(session),
            path: path.to_path_buf(),
        }
    }

    /// From now on nothing reaches the disk: writes and syncs are dropped.
    pub fn cut_power(&self) {
        self.lock().powered = false;
    }

    /// Forgets everything that was not synced before the cut and powers the
    /// disk again. Call it while unmounted.
    pub fn restore_power(&self) {
        let mut tree = self.lock();
        for node in tree.nodes.values_mut() {
            node.revert();
        }
        tree.powered = true;
    }

    /// How many syncs (of files and directories) the disk has seen.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    fn lock(&self) -> MutexGuard<'_, Tree> {
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The FUSE request handler of one mount.
struct Daemon {
    tree: Arc<Mutex<Tree>>,
}

fn attr(ino: u64, node: &Node) -> FileAttr {
    let size = node.data.len() as u64;
    FileAttr {
        ino,
        size,
        blocks: size.div_ceil(512),
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: node.kind,
        perm: node.perm,
        nlink: if node.kind == FileType::Directory { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: BLOCK as u32,
        flags: 0,
    }
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFLNK => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

impl Daemon {
    fn lock(&self) -> MutexGuard<'_, Tree> {
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates `name` in `parent`, or fails with the errno to answer.
    fn make(&self, parent: u64, name: &OsStr, kind: FileType, mode: u32) -> Result<FileAttr, i32> {
        let mut tree = self.lock();
        let Some(dir) = tree.nodes.get(&parent) else {
            return Err(libc::ENOENT);
        };
        if dir.children.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = tree.next_ino;
        tree.next_ino += 1;
        let node = Node::new(kind, (mode & 0o7777) as u16);
        let a = attr(ino, &node);
        tree.nodes.insert(ino, node);
        if let Some(dir) = tree.nodes.get_mut(&parent) {
            dir.children.insert(name.to_os_string(), ino);
        }
        Ok(a)
    }

    fn remove(&self, parent: u64, name: &OsStr, dir_only: bool) -> Result<(), i32> {
        let mut tree = self.lock();
        let ino = *tree
            .nodes
            .get(&parent)
            .and_then(|d| d.children.get(name))
            .ok_or(libc::ENOENT)?;
        let node = tree.nodes.get(&ino).ok_or(libc::ENOENT)?;
        match (dir_only, node.kind == FileType::Directory) {
            (true, false) => return Err(libc::ENOTDIR),
            (false, true) => return Err(libc::EISDIR),
            (true, true) if !node.children.is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        if let Some(dir) = tree.nodes.get_mut(&parent) {
            dir.children.remove(name);
        }
        Ok(())
    }

    /// Makes `ino` durable as it is when the (slow) sync ends.
    fn sync(&self, ino: u64) -> Result<(), i32> {
        let delay = self.lock().sync_delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let mut tree = self.lock();
        if !tree.powered {
            return Ok(());
        }
        tree.nodes.get_mut(&ino).ok_or(libc::ENOENT)?.sync();
        tree.syncs += 1;
        Ok(())
    }
}

fn empty(reply: ReplyEmpty, result: Result<(), i32>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for Daemon {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let tree = self.lock();
        let found = tree
            .nodes
            .get(&parent)
            .and_then(|d| d.children.get(name))
            .and_then(|ino| Some((*ino, tree.nodes.get(ino)?)));
        match found {
            Some((ino, node)) => reply.entry(&TTL, &attr(ino, node), 0),
            None => reply.error(libc::ENOENT),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.lock().nodes.get(&ino) {
            Some(node) => reply.attr(&TTL, &attr(ino, node)),
            None => reply.error(libc::ENOENT),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut tree = self.lock();
        let powered = tree.powered;
        let Some(node) = tree.nodes.get_mut(&ino) else {
            return reply.error(libc::ENOENT);
        };
        if powered {
            if let Some(size) = size {
                node.resize(size as usize);
            }
            if let Some(mode) = mode {
                node.perm = (mode & 0o7777) as u16;
            }
        }
        reply.attr(&TTL, &attr(ino, node));
    }

    fn mknod(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        match self.make(parent, name, kind_of(mode), mode) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        match self.make(parent, name, FileType::Directory, mode) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.make(parent, name, FileType::RegularFile, mode) {
            Ok(a) => reply.created(&TTL, &a, 0, 0, 0),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.remove(parent, name, false));
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.remove(parent, name, true));
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        _flags: u32,
        reply: ReplyEmpty,
    ) {
        let mut tree = self.lock();
        let Some(ino) = tree.nodes.get_mut(&parent).and_then(|d| d.children.remove(name)) else {
            return reply.error(libc::ENOENT);
        };
        match tree.nodes.get_mut(&newparent) {
            Some(dir) => {
                dir.children.insert(newname.to_os_string(), ino);
                reply.ok();
            }
            None => {
                if let Some(dir) = tree.nodes.get_mut(&parent) {
                    dir.children.insert(name.to_os_string(), ino);
                }
                reply.error(libc::ENOENT);
            }
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.lock().nodes.contains_key(&ino) {
            true => reply.opened(0, 0),
            false => reply.error(libc::ENOENT),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let tree = self.lock();
        let Some(node) = tree.nodes.get(&ino) else {
            return reply.error(libc::ENOENT);
        };
        let from = (offset.max(0) as usize).min(node.data.len());
        let to = (from + size as usize).min(node.data.len());
        reply.data(&node.data[from..to]);
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let mut tree = self.lock();
        let powered = tree.powered;
        let Some(node) = tree.nodes.get_mut(&ino) else {
            return reply.error(libc::ENOENT);
        };
        if powered {
            let from = offset.max(0) as usize;
            let to = from + data.len();
            if node.data.len() < to {
                node.resize(to);
            }
            node.data[from..to].copy_from_slice(data);
            node.mark_dirty(from, to);
        }
        reply.written(data.len() as u32);
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        empty(reply, self.sync(ino));
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        empty(reply, self.sync(ino));
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode != 0 {
            return reply.error(libc::EOPNOTSUPP);
        }
        let mut tree = self.lock();
        let powered = tree.powered;
        let Some(node) = tree.nodes.get_mut(&ino) else {
            return reply.error(libc::ENOENT);
        };
        let end = (offset.max(0) + length.max(0)) as usize;
        if powered && node.data.len() < end {
            node.resize(end);
        }
        reply.ok();
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let tree = self.lock();
        let Some(dir) = tree.nodes.get(&ino) else {
            return reply.error(libc::ENOENT);
        };
        let dots = [
            (ino, FileType::Directory, OsStr::new(".")),
            (ino, FileType::Directory, OsStr::new("..")),
        ];
        let children = dir.children.iter().map(|(name, child)| {
            let kind = tree.nodes.get(child).map_or(FileType::RegularFile, |n| n.kind);
            (*child, kind, name.as_os_str())
        });
        for (i, (child, kind, name)) in dots
            .into_iter()
            .chain(children)
            .enumerate()
            .skip(offset.max(0) as usize)
        {
            if reply.add(child, i as i64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        // Plenty of room, so the broker's disk alarm stays off.
        let blocks = 16 * 1024 * 1024 * 1024 / BLOCK;
        reply.statfs(
            blocks,
            blocks,
            blocks,
            1 << 20,
            1 << 20,
            BLOCK as u32,
            255,
            BLOCK as u32,
        );
    }
}
