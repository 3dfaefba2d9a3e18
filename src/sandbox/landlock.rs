//! Landlock: the kernel confines every command to writing beneath the workspace and the run's
//! private temp directory (Linux ≥ 5.13), with no extra process.
//!
//! The ruleset is built in the runner (the parent) with the `landlock` crate and kept as a file
//! descriptor; [`crate::process::spawn`] applies it in the child between the clone and `exec`
//! with two raw system calls (`prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self`), which are
//! async-signal-safe and allocate nothing — the runner is multi-threaded.
//!
//! What the ruleset says, by kernel ABI:
//! - **Reads and execution** (every ABI) follow the bwrap view ([`crate::policy::view`], one decision for
//!   both modes): the system directories, `/proc`, the device nodes programs use, the workspace,
//!   the command's own temporary directory, the toolchain homes, the policy's `read_paths` and the
//!   installation of the program the command runs — each granted around the credential files
//!   inside it (the same split as for protected paths, below). Nothing else can be read, listed or
//!   executed: no home directory, no `~/.ssh`, no host `/tmp`, no disk device. (Landlock does not
//!   restrict `stat`: a command can still learn that a path exists, not what it holds.)
//! - **Writes** (every write-like filesystem right the ABI knows: create, remove, rename, write,
//!   truncate (ABI 3), device ioctls (ABI 5)) are handled, so they are denied except beneath the
//!   granted hierarchies. (UNIX sockets are refused by the seccomp filter instead:
//!   [`crate::process::seccomp::Kind::Landlock`].)
//! - **Protected paths** (`.git/`, `.acode/`, the policy file, the plan and the database — whatever
//!   [`Workspace::protected`] lists — plus every `.git` at any depth and the approval files the
//!   caller passes, as bwrap mounts them read-only): Landlock grants rights on whole hierarchies and cannot deny a
//!   subtree of a granted directory. So the workspace root itself gets *no* right; every existing
//!   top-level entry that is not protected gets every write right on its hierarchy; a directory
//!   that *contains* a protected path is split the same way, one level down. Consequences,
//!   documented in `docs/security.md`: a protected path cannot be created, changed, removed or
//!   replaced, whether it exists or not; and a command cannot create, remove or rename an entry
//!   directly in the workspace root (or in a directory holding a protected path) — create such
//!   entries with a file tool first. Symlinks are never granted (the rule would follow them).
//! - **Network** (ABI ≥ 4): TCP `connect` and `bind` are denied on every port — except `connect`
//!   to the run's proxy port when the policy allows hosts (any address: Landlock rules name
//!   ports, not hosts). UDP is not covered by Landlock; [`crate::process::seccomp`] refuses it.
//! - **Scopes** (ABI ≥ 6): no signal to a process outside the command's own Landlock domain (the
//!   runner included), no connection to an abstract UNIX socket created outside it.
//! - **ptrace** (every ABI): a confined process cannot ptrace, nor read `/proc/<pid>/environ` or
//!   `/proc/<pid>/mem` of, a process outside its domain — the runner's secrets stay out of reach.
//!
//! Because the allowed set depends on which top-level entries exist (a file tool may create one
//! between two commands), [`LandlockRules::ruleset_for`] computes the grant list before each
//! command (one `readdir` of the root) and rebuilds the ruleset only when the list changed.

use std::ffi::OsString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};

use crate::workspace::Workspace;

/// The Landlock ABI version the running kernel supports, or `None` when Landlock is not built in
/// or not enabled (`lsm=` boot parameter).
pub fn kernel_abi() -> Option<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag, the kernel only returns
    // the ABI version (or an error); no memory is read or written.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).ok().filter(|v| *v > 0)
}

/// Which rights a grant gives beneath its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rights {
    /// Read, list and execute.
    Read,
    /// Every write right (create, remove, rename, write, truncate, device ioctls, ...).
    Write,
    /// Both.
    ReadWrite,
}

/// One hierarchy (or file) that gets rights.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    path: PathBuf,
    ino: u64,
    dir: bool,
    rights: Rights,
}

/// The rights the kernel supports at `abi`, as the crate's ABI value (capped at what it knows).
fn crate_abi(abi: u32) -> ABI {
    ABI::from(i32::try_from(abi).unwrap_or(i32::MAX))
}

/// What every command of a run may read whatever it runs, computed once: the roots shown beyond
/// the system ([`crate::policy::view::shown`] of the toolchain homes and `read_paths`), and the grants.
#[derive(Debug)]
struct FixedReads {
    roots: Vec<PathBuf>,
    grants: Vec<Grant>,
}

/// How many rulesets a run keeps, most recently used first: one per temporary directory in use
/// at once (`--jobs`), each reused by the commands that get that directory after it.
const RULESETS_KEPT: usize = 8;

/// Landlock rules for one run: the ABI to use, the extra writable directories (the run's downloads
/// directory), the rulesets last built (reused while their grants are unchanged: the temporary
/// directories of finished commands are reused, emptied) and the handles of their grants.
#[derive(Debug)]
pub struct LandlockRules {
    abi: u32,
    extra_writable: Vec<PathBuf>,
    /// The policy's `read_paths`.
    read_paths: Vec<PathBuf>,
    /// What every command of the run may read whatever it runs ([`crate::policy::view`]), computed once.
    fixed_reads: std::sync::OnceLock<FixedReads>,
    /// TCP ports commands may connect to (the run's proxy), at ABI ≥ 4.
    connect_ports: Vec<u16>,
    /// TCP ports commands may bind (the forwarder inside bwrap), at ABI ≥ 4.
    bind_ports: Vec<u16>,
    cache: Mutex<Vec<(Vec<Grant>, Arc<OwnedFd>)>>,
    /// The `O_PATH` descriptors of the last ruleset's grants, by path and inode: a ruleset is
    /// built for every command under Landlock (each has a temporary directory of its own), and
    /// reusing them leaves one system call per rule.
    handles: Mutex<std::collections::HashMap<(PathBuf, u64), OwnedFd>>,
}

/// A ruleset that could not be built (fail closed: the command does not run).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the Landlock ruleset: {0}")]
pub struct LandlockError(String);

impl LandlockError {
    /// An error with this explanation.
    pub fn new(message: impl Into<String>) -> Self {
        LandlockError(message.into())
    }
}

impl From<LandlockError> for std::io::Error {
    fn from(e: LandlockError) -> Self {
        std::io::Error::other(e.to_string())
    }
}

impl LandlockRules {
    /// Rules for a kernel at `abi` that also let commands write beneath each of `extra_writable`
    /// (the run's downloads directory).
    pub fn new(abi: u32, extra_writable: Vec<PathBuf>) -> Self {
        LandlockRules {
            abi,
            extra_writable,
            read_paths: Vec::new(),
            fixed_reads: std::sync::OnceLock::new(),
            connect_ports: Vec::new(),
            bind_ports: Vec::new(),
            cache: Mutex::new(Vec::new()),
            handles: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Lets commands connect to (and bind) these TCP ports, all others staying denied: the way to
    /// the run's proxy when the policy allows hosts.
    pub fn with_tcp_ports(mut self, connect: &[u16], bind: &[u16]) -> Self {
        self.connect_ports = connect.to_vec();
        self.bind_ports = bind.to_vec();
        self
    }

    /// Lets commands read the policy's `read_paths` too (absolute ones; credentials inside them
    /// stay hidden), as bwrap shows them.
    pub fn with_read_paths(mut self, paths: &[PathBuf]) -> Self {
        self.read_paths = paths.to_vec();
        self
    }

    /// The port rules, added to a created ruleset that handles the network.
    fn add_port_rules(
        &self,
        mut created: landlock::RulesetCreated,
    ) -> Result<landlock::RulesetCreated, LandlockError> {
        let err = |e: landlock::RulesetError| LandlockError(e.to_string());
        for port in &self.connect_ports {
            created = created
                .add_rule(landlock::NetPort::new(*port, AccessNet::ConnectTcp))
                .map_err(err)?;
        }
        for port in &self.bind_ports {
            created = created
                .add_rule(landlock::NetPort::new(*port, AccessNet::BindTcp))
                .map_err(err)?;
        }
        Ok(created)
    }

    /// The ABI the rules are built for.
    pub fn abi(&self) -> u32 {
        self.abi
    }

    /// The ruleset (a Landlock file descriptor) for a command in `workspace` now; see the module
    /// docs. `protected` adds paths no command may write beyond [`Workspace::protected`] (every
    /// nested `.git`, the approval files); `program_roots` is the installation of the program the
    /// command runs ([`crate::policy::host::program::Program::roots`]); `own` are directories of this command's
    /// alone it may read and write (its temporary directory). Shared: the child only reads the
    /// descriptor number.
    pub fn ruleset_for(
        &self,
        workspace: &Workspace,
        protected: &[PathBuf],
        program_roots: &[PathBuf],
        own: &[PathBuf],
    ) -> Result<Arc<OwnedFd>, LandlockError> {
        let mut grants = Vec::new();
        let protected = beneath(
            workspace.root(),
            workspace.protected().iter().chain(protected),
        );
        let protected: Vec<&[OsString]> = protected.iter().map(Vec::as_slice).collect();
        split(workspace.root(), &protected, Rights::Write, &mut grants);
        for extra in self.extra_writable.iter().chain(own) {
            if let Ok(m) = std::fs::symlink_metadata(extra)
                && m.is_dir()
            {
                grants.push(Grant {
                    path: extra.clone(),
                    ino: m.ino(),
                    dir: true,
                    rights: Rights::ReadWrite,
                });
            }
        }
        grants.extend(grant(workspace.root(), Rights::Read));
        let fixed = self
            .fixed_reads
            .get_or_init(|| fixed_reads(&self.read_paths));
        grants.extend(fixed.grants.iter().cloned());
        for root in program_roots {
            if !fixed.roots.iter().any(|f| root.starts_with(f)) {
                shown_read(root, &mut grants);
            }
        }
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = cache.iter().position(|(cached, _)| *cached == grants) {
            let hit = cache.remove(i);
            let fd = hit.1.clone();
            cache.insert(0, hit);
            return Ok(fd);
        }
        let fd = Arc::new(self.build(&grants)?);
        cache.insert(0, (grants, fd.clone()));
        cache.truncate(RULESETS_KEPT);
        Ok(fd)
    }

    /// A ruleset with no filesystem rule, only the network denial (ABI ≥ 4) and the scopes
    /// (ABI ≥ 6), for commands inside bwrap: a domain that handles filesystem access forbids
    /// `mount(2)`, which bwrap needs, but one that handles only network and scopes does not.
    /// `None` when the ABI has neither.
    pub fn network_and_scopes_only(&self) -> Result<Option<OwnedFd>, LandlockError> {
        if self.abi < 4 {
            return Ok(None);
        }
        let abi = crate_abi(self.abi);
        let err = |e: landlock::RulesetError| LandlockError(e.to_string());
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessNet::from_all(abi))
            .map_err(err)?;
        if self.abi >= 6 {
            ruleset = ruleset.scope(Scope::from_all(abi)).map_err(err)?;
        }
        let created = self.add_port_rules(ruleset.create().map_err(err)?)?;
        let fd: Option<OwnedFd> = created.into();
        Ok(fd)
    }

    /// A ruleset with the scopes (ABI ≥ 6: signals and abstract UNIX sockets stay inside the
    /// domain) and nothing else denied: the own domain of a supervisor's shim under Landlock
    /// alone ([`crate::process::supervisor`]), in which each command's ruleset nests and decides files and
    /// network alone. Linking or renaming across directories is the one right every layer of a
    /// domain denies unless it grants it, so this one grants it everywhere (`/` and beneath):
    /// without that, a command's `rename` between two directories it may write fails with
    /// `EXDEV`. `None` below ABI 6.
    pub fn scopes_only(&self) -> Result<Option<OwnedFd>, LandlockError> {
        if self.abi < 6 {
            return Ok(None);
        }
        let abi = crate_abi(self.abi);
        let err = |e: landlock::RulesetError| LandlockError(e.to_string());
        let root = landlock::PathFd::new("/").map_err(|e| LandlockError(e.to_string()))?;
        let created = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::Refer)
            .map_err(err)?
            .scope(Scope::from_all(abi))
            .map_err(err)?
            .create()
            .map_err(err)?
            .add_rule(PathBeneath::new(root, AccessFs::Refer))
            .map_err(err)?;
        let fd: Option<OwnedFd> = created.into();
        Ok(fd)
    }

    fn build(&self, grants: &[Grant]) -> Result<OwnedFd, LandlockError> {
        let abi = crate_abi(self.abi);
        let err = |e: landlock::RulesetError| LandlockError(e.to_string());
        let write = AccessFs::from_write(abi);
        let read = AccessFs::from_read(abi);
        let file = AccessFs::from_file(abi);
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(write | read)
            .map_err(err)?;
        if self.abi >= 4 {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(abi))
                .map_err(err)?;
        }
        if self.abi >= 6 {
            ruleset = ruleset.scope(Scope::from_all(abi)).map_err(err)?;
        }
        let mut created = ruleset.create().map_err(err)?;
        if self.abi >= 4 {
            created = self.add_port_rules(created)?;
        }
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        let mut kept = std::collections::HashMap::with_capacity(grants.len());
        for g in grants {
            let key = (g.path.clone(), g.ino);
            let fd = match handles.remove(&key) {
                Some(fd) => fd,
                None => {
                    // Opened without following a symlink, and checked to be the inode the grant
                    // list saw, so a swap between listing and opening cannot widen the rule. (A
                    // kept handle is that inode for good.)
                    let Some(fd) = open_path(&g.path) else {
                        continue;
                    };
                    let Ok(meta) = std::fs::File::from(fd.try_clone().map_err(io_err)?).metadata()
                    else {
                        continue;
                    };
                    if meta.ino() != g.ino
                        || meta.is_dir() != g.dir
                        || meta.file_type().is_symlink()
                    {
                        continue;
                    }
                    fd
                }
            };
            let mut access: BitFlags<AccessFs> = match g.rights {
                Rights::Read => read,
                Rights::Write => write,
                Rights::ReadWrite => read | write,
            };
            if !g.dir {
                access &= file;
            }
            created = created
                .add_rule(PathBeneath::new(&fd, access))
                .map_err(err)?;
            kept.insert(key, fd);
        }
        // Only the handles of this ruleset's grants stay open (a command's own temporary
        // directory, gone after it, is not kept).
        *handles = kept;
        let fd: Option<OwnedFd> = created.into();
        fd.ok_or_else(|| LandlockError("the kernel returned no ruleset".to_string()))
    }
}

/// The read grants every command of a run gets whatever it runs: the system directories, `/proc`,
/// the device nodes ([`crate::policy::view::DEVICES`], some writable), and the toolchain homes and
/// `read_paths` around the credentials inside them.
fn fixed_reads(read_paths: &[PathBuf]) -> FixedReads {
    let mut out = Vec::new();
    for dir in crate::policy::host::dirs::SYSTEM_DIRS
        .iter()
        .chain(&["/proc"])
    {
        // A usr-merge symlink (`/bin` -> `usr/bin`) gets nothing: its target is granted.
        out.extend(grant(Path::new(dir), Rights::Read));
    }
    for (dev, writable) in crate::policy::view::DEVICES {
        let rights = if *writable {
            Rights::ReadWrite
        } else {
            Rights::Read
        };
        out.extend(grant(Path::new(dev), rights));
    }
    let roots = crate::policy::view::shown(read_paths, &[]);
    for root in &roots {
        shown_read(root, &mut out);
    }
    FixedReads { roots, grants: out }
}

/// Read grants for `root`, a directory (or file) [`crate::policy::view`] shows: whole, or split around the
/// credential paths inside it; nothing when `root` is one.
fn shown_read(root: &Path, out: &mut Vec<Grant>) {
    let hidden = crate::policy::view::hidden_within(&[root.to_path_buf()]);
    if hidden.iter().any(|h| root.starts_with(h)) {
        return;
    }
    if hidden.is_empty() {
        out.extend(grant(root, Rights::Read));
        return;
    }
    let hidden = beneath(root, &hidden);
    let hidden: Vec<&[OsString]> = hidden.iter().map(Vec::as_slice).collect();
    split(root, &hidden, Rights::Read, out);
}

/// The components below `root` of each of `paths` that lies strictly beneath it: what [`split`]
/// excludes (protected paths in the workspace, credentials in a shown directory).
fn beneath<'a>(root: &Path, paths: impl IntoIterator<Item = &'a PathBuf>) -> Vec<Vec<OsString>> {
    paths
        .into_iter()
        .filter_map(|p| p.strip_prefix(root).ok())
        .map(|rel| rel.iter().map(|c| c.to_os_string()).collect::<Vec<_>>())
        .filter(|c| !c.is_empty())
        .collect()
}

/// A grant of `rights` on `path` as it is now (a directory or a regular or device file; never a
/// symlink, which the rule would follow), or nothing when it does not exist.
fn grant(path: &Path, rights: Rights) -> Option<Grant> {
    use std::os::unix::fs::FileTypeExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    let ft = m.file_type();
    let usable = ft.is_dir() || ft.is_file() || ft.is_char_device();
    usable.then(|| Grant {
        path: path.to_path_buf(),
        ino: m.ino(),
        dir: ft.is_dir(),
        rights,
    })
}

fn io_err(e: std::io::Error) -> LandlockError {
    LandlockError(e.to_string())
}

/// `open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC)`.
fn open_path(path: &Path) -> Option<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let fd: RawFd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just returned by open(2) and is owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Grants `rights` on every entry of `dir` except those on an excluded path (a protected path for
/// writes, a credential for reads); an entry that contains one is split again one level down.
/// Symlinks and special files are never granted.
fn split(dir: &Path, protected: &[&[OsString]], rights: Rights, out: &mut Vec<Grant>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let Ok(ft) = entry.file_type() else { continue };
        if !(ft.is_dir() || ft.is_file()) {
            continue;
        }
        let name = entry.file_name();
        let below: Vec<&[OsString]> = protected
            .iter()
            .filter(|p| p.first() == Some(&name))
            .map(|p| &p[1..])
            .collect();
        let path = entry.path();
        if below.is_empty() {
            out.push(Grant {
                path,
                ino: entry.ino(),
                dir: ft.is_dir(),
                rights,
            });
        } else if below.iter().all(|rest| !rest.is_empty()) && ft.is_dir() {
            split(&path, &below, rights, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(grants: &[Grant], root: &Path) -> Vec<String> {
        grants
            .iter()
            .map(|g| g.path.strip_prefix(root).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn protected_paths_split_their_parents_and_are_never_granted() {
        let root = std::env::temp_dir().join(format!("acode-ll-{}", uuid::Uuid::new_v4()));
        for d in [".git/hooks", "plans/old", "src", ".acode"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "plans/run.json",
            "plans/other.json",
            "README",
            "acode-policy.json",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
        let mut ws = Workspace::new(&root).unwrap();
        ws.protect(Path::new(".acode"));
        ws.protect(Path::new("plans/run.json"));
        let root = ws.root().to_path_buf();
        let protected: Vec<Vec<OsString>> = ws
            .protected()
            .iter()
            .map(|p| {
                p.strip_prefix(&root)
                    .unwrap()
                    .iter()
                    .map(|c| c.to_os_string())
                    .collect()
            })
            .collect();
        let protected: Vec<&[OsString]> = protected.iter().map(Vec::as_slice).collect();
        let mut grants = Vec::new();
        split(&root, &protected, Rights::Write, &mut grants);
        // The root, `.git`, `.acode`, the policy, the plan and the symlink get nothing; `plans/`
        // is split so its other entries stay writable.
        assert_eq!(
            names(&grants, &root),
            ["README", "plans/old", "plans/other.json", "src"]
        );
        assert!(grants.iter().find(|g| g.path.ends_with("src")).unwrap().dir);
        assert!(
            !grants
                .iter()
                .find(|g| g.path.ends_with("README"))
                .unwrap()
                .dir
        );
    }
}
