//! Output files: where the report goes (frontend.md §3.7) and how files are written.
//!
//! Every output is resolved and checked before the simulation starts ([`PreparedOutput::prepare`]):
//! - a regular file (existing or new, through any symlinks) is written to a temporary file in
//!   its real directory and renamed over it only when every output of the run is complete, so
//!   a reader (or a crash) never sees a half-written file and a symlink keeps pointing at it;
//! - anything else (`/dev/null`, `/dev/full`, `/dev/stdout`, a FIFO, a terminal) is written
//!   through in place, never replaced;
//! - missing parent directories are created up front, and removed again if the run fails.
//!
//! A prepared output that is dropped without [`commit`] removes its temporary file and the
//! directories it created, so one failed output leaves no other behind. The binary also
//! removes them when interrupted ([`install_interrupt_cleanup`]).
//!
//! INTERFACE: `resolve_report_path`, `PreparedOutput::{prepare, write_all}`, `commit`,
//! `install_interrupt_cleanup`; `check_jsonl_path`, `write_records` and `RecordStream` (records
//! written at the end, or while the run goes on); `write_atomically` for a file in one go.

use std::fs;
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use dynosim::report::RecordSink;
use dynosim::{Error, RequestRecord, Result};

/// Stem of the default report file name; the local time `%Y%m%d_%H%M%S` and `.json` follow.
const DEFAULT_REPORT_STEM: &str = "dynamo_replay_report_";

/// How many symbolic links are followed before giving up (the kernel's own limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// The report path for a `--report-json` value, as the reference resolves it:
/// - absent: `<cwd>/dynamo_replay_report_<local time>.json` (absolute);
/// - an existing directory: a timestamped file inside it;
/// - anything else: the path itself (written as given; missing parents are created later).
///
/// Paths are normalised the way Python's `pathlib` prints them (`./a//b/` is `a/b`), because
/// the path is echoed in `Saved full report to: <path>`.
pub fn resolve_report_path(requested: Option<&Path>) -> Result<PathBuf> {
    match requested {
        None => {
            let cwd = std::env::current_dir().map_err(|err| {
                Error::runtime(format!(
                    "cannot determine the current directory: {}",
                    describe(&err)
                ))
            })?;
            Ok(cwd.join(unused_default_name(&cwd)))
        }
        Some(path) => {
            let path = normalize_like_pathlib(path);
            if path.is_dir() {
                let name = unused_default_name(&path);
                Ok(join_like_pathlib(&path, &name))
            } else {
                Ok(path)
            }
        }
    }
}

/// `dynamo_replay_report_%Y%m%d_%H%M%S.json` in local time.
pub fn default_report_file_name() -> String {
    format!("{DEFAULT_REPORT_STEM}{}.json", local_timestamp())
}

/// The default report name for a file in `dir`, made unique: when a report of the same second
/// is already there, `_2`, `_3`, ... follows the time (the reference overwrites it, so of quick
/// successive runs only the last report would remain).
fn unused_default_name(dir: &Path) -> String {
    let stamp = local_timestamp();
    let name = format!("{DEFAULT_REPORT_STEM}{stamp}.json");
    // A dangling link counts as taken: writing the report would follow it.
    let free = |name: &str| dir.join(name).symlink_metadata().is_err();
    if free(&name) {
        return name;
    }
    (2u64..)
        .map(|n| format!("{DEFAULT_REPORT_STEM}{stamp}_{n}.json"))
        .find(|name| free(name))
        .unwrap_or(name)
}

/// Rejects a per-request JSONL path that can never be written (an existing directory) before
/// any simulation work, as a usage error naming the flag.
pub fn check_jsonl_path(flag: &str, path: Option<&Path>) -> Result<()> {
    match path {
        Some(path) if path.is_dir() => Err(Error::usage_about(
            flag,
            format!("{} is a directory; give a file path", path.display()),
        )),
        _ => Ok(()),
    }
}

/// Writes the per-request records, one compact JSON object per line, to a prepared output.
pub fn write_records<R: std::borrow::Borrow<RequestRecord>>(
    output: &mut PreparedOutput,
    records: impl IntoIterator<Item = R>,
) -> Result<()> {
    for record in records {
        let record = record.borrow();
        let mut line = record.to_json_line();
        if !line.ends_with('\n') {
            line.push('\n');
        }
        output.write_all(line.as_bytes())?;
    }
    Ok(())
}

/// A prepared JSONL output that records are written to while the run goes on: the
/// simulator's [`RecordSink`] end ([`RecordStream::sink`]) writes each record as it comes; the
/// first write error is kept and the rest skipped, and [`RecordStream::finish`] gives the
/// output back (to publish with [`commit`]) or that error.
pub struct RecordStream {
    shared: Arc<Mutex<StreamState>>,
}

struct StreamState {
    output: PreparedOutput,
    failed: Option<Error>,
}

struct StreamSink(Arc<Mutex<StreamState>>);

impl RecordSink for StreamSink {
    fn accept(&mut self, record: RequestRecord) {
        // A poisoned lock means a writer panicked: nothing more can be written anyway.
        let Ok(mut state) = self.0.lock() else {
            return;
        };
        if state.failed.is_none() {
            if let Err(err) = write_records(&mut state.output, [record]) {
                state.failed = Some(err);
            }
        }
    }
}

impl RecordStream {
    pub fn new(output: PreparedOutput) -> Self {
        Self {
            shared: Arc::new(Mutex::new(StreamState {
                output,
                failed: None,
            })),
        }
    }

    /// The end the simulator writes to.
    pub fn sink(&self) -> Box<dyn RecordSink> {
        Box::new(StreamSink(Arc::clone(&self.shared)))
    }

    /// The output with every record written, once the run (and its sink) is over.
    pub fn finish(self) -> Result<PreparedOutput> {
        let state = Arc::try_unwrap(self.shared)
            .map_err(|_| Error::runtime("the per-request records are still being written"))?
            .into_inner()
            .map_err(|_| Error::runtime("writing the per-request records failed"))?;
        match state.failed {
            Some(err) => Err(err),
            None => Ok(state.output),
        }
    }
}

/// Writes `contents` to `path` in one go (prepare, write, commit).
pub fn write_atomically(path: &Path, contents: &[u8], what: &'static str) -> Result<()> {
    let mut output = PreparedOutput::prepare(what, path)?;
    output.write_all(contents)?;
    commit(vec![output])
}

/// One output, resolved, checked and opened before the run; published by [`commit`].
pub struct PreparedOutput {
    /// What the file holds, for messages ("report JSON").
    what: &'static str,
    /// The path as the user named it, for messages.
    shown: PathBuf,
    sink: Sink,
    /// Directories created for this output, outermost first; removed if it is abandoned.
    created_dirs: Vec<PathBuf>,
    /// Interrupt-cleanup registrations of the temporary file and the created directories.
    cleanup: Vec<interrupt::Registration>,
    published: bool,
}

enum Sink {
    /// A regular file: written to `temp` in the target's real directory, renamed to `target`.
    Replace {
        target: PathBuf,
        temp: PathBuf,
        file: Option<io::BufWriter<fs::File>>,
    },
    /// A device, FIFO or `/dev`, `/proc` path: opened at the first write and written in place.
    Through {
        path: PathBuf,
        truncate: bool,
        file: Option<io::BufWriter<fs::File>>,
    },
}

impl PreparedOutput {
    /// Resolves `path` and checks that it can be written, before any simulation work: a
    /// regular file (or a new one) gets its temporary file now, missing parent directories are
    /// created, a special file is checked for write permission. Errors are runtime errors
    /// naming the path and what is wrong with it.
    pub fn prepare(what: &'static str, path: &Path) -> Result<Self> {
        let fail = |detail: String| {
            Error::runtime(format!(
                "cannot write the {what} to {}: {detail}",
                path.display()
            ))
        };
        let mut output = Self {
            what,
            shown: path.to_path_buf(),
            sink: Sink::Through {
                path: path.to_path_buf(),
                truncate: false,
                file: None,
            },
            created_dirs: Vec::new(),
            cleanup: Vec::new(),
            published: false,
        };
        match fs::metadata(path) {
            Ok(meta) if meta.is_dir() => Err(fail("it is a directory".into())),
            Ok(meta) if meta.is_file() && !reaches_pseudo_filesystem(path) => {
                let target = fs::canonicalize(path).map_err(|err| fail(describe(&err)))?;
                output
                    .open_temp(target, Some(meta.permissions()))
                    .map_err(fail)?;
                Ok(output)
            }
            Ok(meta) => {
                check_writable_in_place(path, &meta).map_err(|err| fail(describe(&err)))?;
                output.sink = Sink::Through {
                    path: path.to_path_buf(),
                    truncate: meta.is_file(),
                    file: None,
                };
                Ok(output)
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                let target = follow_dangling_links(path).map_err(fail)?;
                output.create_missing_parents(&target).map_err(fail)?;
                output.open_temp(target, None).map_err(fail)?;
                Ok(output)
            }
            Err(err) => Err(fail(explain_unreachable(path, &err))),
        }
    }

    /// The path as the user named it.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Appends bytes to the output (to the temporary file, or in place for a special file).
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        let result = self.writer().and_then(|writer| writer.write_all(bytes));
        result.map_err(|err| self.error(&err))
    }

    fn writer(&mut self) -> io::Result<&mut io::BufWriter<fs::File>> {
        match &mut self.sink {
            Sink::Replace { file, .. } => file
                .as_mut()
                .ok_or_else(|| io::Error::other("the output was already closed")),
            Sink::Through {
                path,
                truncate,
                file,
            } => {
                if file.is_none() {
                    let opened = fs::OpenOptions::new()
                        .write(true)
                        .truncate(*truncate)
                        .open(&*path)?;
                    *file = Some(io::BufWriter::new(opened));
                }
                Ok(file.as_mut().expect("opened just above"))
            }
        }
    }

    /// Flushes everything written so far; for a special file, this is where it is complete.
    fn finish_writing(&mut self) -> Result<()> {
        let result = self.writer().and_then(|writer| writer.flush());
        let result = result.and_then(|()| match &mut self.sink {
            Sink::Replace { file, .. } => {
                let file = file.take().expect("still open before publishing");
                file.into_inner().map(drop).map_err(|err| err.into_error())
            }
            Sink::Through { file, .. } => {
                file.take();
                Ok(())
            }
        });
        result.map_err(|err| self.error(&err))
    }

    /// Moves a complete temporary file over its target.
    fn publish(&mut self) -> Result<()> {
        if let Sink::Replace { target, temp, .. } = &self.sink {
            fs::rename(temp, target).map_err(|err| self.error(&err))?;
        }
        self.published = true;
        self.cleanup.clear();
        Ok(())
    }

    fn error(&self, err: &io::Error) -> Error {
        Error::runtime(format!(
            "cannot write the {} to {}: {}",
            self.what,
            self.shown.display(),
            describe(err)
        ))
    }

    /// Creates the temporary file next to `target` (in its real directory, so the final
    /// rename stays within one file system and replaces the file a symlink points at).
    fn open_temp(
        &mut self,
        target: PathBuf,
        permissions: Option<fs::Permissions>,
    ) -> std::result::Result<(), String> {
        let name = target
            .file_name()
            .ok_or_else(|| "not a file path".to_string())?
            .to_os_string();
        let dir = fs::canonicalize(parent_of(&target)).map_err(|err| {
            format!(
                "cannot resolve directory {}: {}",
                parent_of(&target).display(),
                describe(&err)
            )
        })?;
        let target = dir.join(&name);
        let mut attempt = 0u32;
        let (temp, file) = loop {
            let mut temp_name = std::ffi::OsString::from(".");
            temp_name.push(&name);
            temp_name.push(format!(".{}", std::process::id()));
            if attempt > 0 {
                temp_name.push(format!(".{attempt}"));
            }
            temp_name.push(".tmp");
            let temp = dir.join(temp_name);
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temp)
            {
                Ok(file) => break (temp, file),
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => {
                    attempt += 1;
                }
                Err(err) => {
                    return Err(format!(
                        "cannot create a file in {}: {}",
                        dir.display(),
                        describe(&err)
                    ))
                }
            }
        };
        self.cleanup.push(interrupt::Registration::new(&temp));
        if let Some(permissions) = permissions {
            // Replacing a file keeps its mode, as writing it in place would.
            let _ = file.set_permissions(permissions);
        }
        self.sink = Sink::Replace {
            target,
            temp,
            file: Some(io::BufWriter::with_capacity(1 << 16, file)),
        };
        Ok(())
    }

    /// Creates the missing ancestors of `target`, outermost first, remembering them.
    fn create_missing_parents(&mut self, target: &Path) -> std::result::Result<(), String> {
        let mut missing = Vec::new();
        let mut dir = parent_of(target);
        loop {
            match fs::symlink_metadata(&dir) {
                Ok(_) => break,
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    missing.push(dir.clone());
                    match dir.parent() {
                        Some(parent) if !parent.as_os_str().is_empty() => {
                            dir = parent.to_path_buf()
                        }
                        _ => break,
                    }
                }
                Err(err) => return Err(explain_unreachable(&dir, &err)),
            }
        }
        if let Ok(meta) = fs::metadata(&dir) {
            if !meta.is_dir() {
                return Err(format!("{} is not a directory", dir.display()));
            }
        }
        for dir in missing.into_iter().rev() {
            fs::create_dir(&dir).map_err(|err| {
                format!(
                    "cannot create directory {}: {}",
                    dir.display(),
                    describe(&err)
                )
            })?;
            self.cleanup.push(interrupt::Registration::new(&dir));
            self.created_dirs.push(dir);
        }
        Ok(())
    }
}

impl Drop for PreparedOutput {
    /// An output that was not published leaves nothing behind.
    fn drop(&mut self) {
        if self.published {
            return;
        }
        if let Sink::Replace { temp, file, .. } = &mut self.sink {
            file.take();
            let _ = fs::remove_file(&*temp);
        }
        for dir in self.created_dirs.iter().rev() {
            // Only if still empty: another output may have been published into it.
            let _ = fs::remove_dir(dir);
        }
        self.cleanup.clear();
    }
}

/// Completes every output, then publishes them: if any output cannot be completed, none is
/// published and all their temporary files and created directories are removed.
pub fn commit(mut outputs: Vec<PreparedOutput>) -> Result<()> {
    for output in &mut outputs {
        output.finish_writing()?;
    }
    for output in &mut outputs {
        output.publish()?;
    }
    Ok(())
}

/// The parent directory of a path, `.` for a bare file name.
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Whether following `path`'s symbolic links passes through `/dev` or `/proc` (`/dev/stdout`,
/// `/proc/self/fd/1`): those name an open file of this process, which must be written in
/// place even when it is a regular file.
fn reaches_pseudo_filesystem(path: &Path) -> bool {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_SYMLINK_HOPS {
        if current.starts_with("/dev") || current.starts_with("/proc") {
            return true;
        }
        match fs::read_link(&current) {
            Ok(link) => current = parent_of(&current).join(link),
            Err(_) => return false,
        }
    }
    false
}

/// The path a new file must be created at: `path` itself, or where a dangling symbolic link
/// (chain) points.
fn follow_dangling_links(path: &Path) -> std::result::Result<PathBuf, String> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_SYMLINK_HOPS {
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link = fs::read_link(&current).map_err(|err| describe(&err))?;
                current = parent_of(&current).join(link);
            }
            Ok(_) => return Ok(current),
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(current),
            Err(err) => return Err(explain_unreachable(&current, &err)),
        }
    }
    Err("too many levels of symbolic links".into())
}

/// Checks in advance that a special file can be opened for writing. A FIFO is only checked
/// for permission: opening it would block until a reader comes, and closing it again would
/// signal end-of-file to that reader.
fn check_writable_in_place(path: &Path, meta: &fs::Metadata) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_fifo() {
            let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
                .map_err(|_| io::Error::other("the path contains a NUL byte"))?;
            // SAFETY: `c_path` is a valid NUL-terminated string for the duration of the call.
            let allowed = unsafe { libc::access(c_path.as_ptr(), libc::W_OK) } == 0;
            return if allowed {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            };
        }
    }
    let _ = meta;
    fs::OpenOptions::new().write(true).open(path).map(drop)
}

/// Why an output path cannot be reached: names the ancestor that is not a directory
/// (`/proc/version/out.json`, `file/out.json`), otherwise the system's reason.
fn explain_unreachable(path: &Path, err: &io::Error) -> String {
    #[cfg(unix)]
    if err.raw_os_error() == Some(libc::ENOTDIR) {
        for ancestor in path.ancestors().skip(1) {
            if ancestor.as_os_str().is_empty() {
                break;
            }
            if let Ok(meta) = fs::metadata(ancestor) {
                if !meta.is_dir() {
                    return format!("{} is not a directory", ancestor.display());
                }
            }
        }
    }
    describe(err)
}

/// An I/O error as a phrase, without Rust's `(os error N)` suffix.
pub fn describe(err: &io::Error) -> String {
    let text = err.to_string();
    match text.find(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// Removal of temporary files and created directories when the process is interrupted.
///
/// Signal handlers may only call async-signal-safe functions, so the paths to remove live in a
/// fixed table of C strings that the handler walks with `unlink` and `rmdir`.
mod interrupt {
    use std::path::Path;

    /// A path the interrupt handler removes, until this registration is dropped.
    pub struct Registration {
        #[cfg(unix)]
        slot: Option<usize>,
    }

    #[cfg(unix)]
    mod table {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        use std::path::Path;
        use std::sync::atomic::{AtomicPtr, Ordering};

        const SLOTS: usize = 64;
        static PATHS: [AtomicPtr<libc::c_char>; SLOTS] =
            [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];

        pub fn register(path: &Path) -> Option<usize> {
            let absolute = std::path::absolute(path).ok()?;
            let c_path = CString::new(absolute.as_os_str().as_bytes()).ok()?;
            let raw = c_path.into_raw();
            for (index, slot) in PATHS.iter().enumerate() {
                if slot
                    .compare_exchange(
                        std::ptr::null_mut(),
                        raw,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    )
                    .is_ok()
                {
                    return Some(index);
                }
            }
            // SAFETY: `raw` came from `into_raw` above and was not published anywhere.
            drop(unsafe { CString::from_raw(raw) });
            None
        }

        /// Forgets a slot. The string is leaked on purpose: a handler running on another
        /// thread may still be reading it.
        pub fn unregister(index: usize) {
            PATHS[index].store(std::ptr::null_mut(), Ordering::SeqCst);
        }

        extern "C" fn on_signal(signal: libc::c_int) {
            for slot in PATHS.iter() {
                let path = slot.load(Ordering::SeqCst);
                if !path.is_null() {
                    // SAFETY: registered pointers are valid NUL-terminated strings, never freed.
                    unsafe { libc::unlink(path) };
                }
            }
            // Directories were registered outermost first; remove the innermost first.
            for slot in PATHS.iter().rev() {
                let path = slot.load(Ordering::SeqCst);
                if !path.is_null() {
                    // SAFETY: as above.
                    unsafe { libc::rmdir(path) };
                }
            }
            // SAFETY: restoring the default action and re-raising ends the process with the
            // status a shell expects from this signal.
            unsafe {
                libc::signal(signal, libc::SIG_DFL);
                libc::raise(signal);
            }
        }

        pub fn install() {
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                // SAFETY: installing a handler that only calls async-signal-safe functions.
                let previous = unsafe { libc::signal(signal, handler) };
                if previous == libc::SIG_IGN {
                    // Ignored by whoever started us (nohup): keep it ignored.
                    unsafe { libc::signal(signal, libc::SIG_IGN) };
                }
            }
        }
    }

    impl Registration {
        pub fn new(path: &Path) -> Self {
            #[cfg(unix)]
            {
                Self {
                    slot: table::register(path),
                }
            }
            #[cfg(not(unix))]
            {
                let _ = path;
                Self {}
            }
        }
    }

    impl Drop for Registration {
        fn drop(&mut self) {
            #[cfg(unix)]
            if let Some(slot) = self.slot {
                table::unregister(slot);
            }
        }
    }

    pub fn install() {
        #[cfg(unix)]
        table::install();
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP remove the temporary files and directories of outputs
/// that are not yet published before the process ends. For the binary only: a host program
/// (the Python interpreter) owns its signals.
pub fn install_interrupt_cleanup() {
    interrupt::install();
}

/// Rebuilds a path from its components, which drops repeated and trailing separators and
/// interior `.` components; a leading `.` is dropped too unless it is the whole path.
pub fn normalize_like_pathlib(path: &Path) -> PathBuf {
    let mut normalized = PathBuf::new();
    for component in path.components() {
        if component != Component::CurDir {
            normalized.push(component.as_os_str());
        }
    }
    if normalized.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        normalized
    }
}

/// `Path(".") / name` prints as `name` in Python; Rust would print `./name`.
fn join_like_pathlib(dir: &Path, name: &str) -> PathBuf {
    if dir == Path::new(".") {
        PathBuf::from(name)
    } else {
        dir.join(name)
    }
}

/// The local time as `%Y%m%d_%H%M%S`.
fn local_timestamp() -> String {
    let (year, month, day, hour, minute, second) = local_time_fields();
    format!("{year:04}{month:02}{day:02}_{hour:02}{minute:02}{second:02}")
}

#[cfg(unix)]
fn local_time_fields() -> (i64, u32, u32, u32, u32, u32) {
    let now_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs() as i64)
        .unwrap_or(0);
    let now = now_secs as libc::time_t;
    // SAFETY: `localtime_r` only writes the `tm` we own; both pointers are valid for the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let converted = unsafe { !libc::localtime_r(&now, &mut tm).is_null() };
    if !converted {
        return utc_fields(now_secs);
    }
    (
        i64::from(tm.tm_year) + 1900,
        (tm.tm_mon + 1) as u32,
        tm.tm_mday as u32,
        tm.tm_hour as u32,
        tm.tm_min as u32,
        tm.tm_sec as u32,
    )
}

#[cfg(not(unix))]
fn local_time_fields() -> (i64, u32, u32, u32, u32, u32) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs() as i64)
        .unwrap_or(0);
    utc_fields(now)
}

/// Calendar fields of a Unix time in UTC (days-to-civil conversion of the proleptic
/// Gregorian calendar); the fallback when the local time zone cannot be read.
fn utc_fields(unix_seconds: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = unix_seconds.div_euclid(86_400);
    let second_of_day = unix_seconds.rem_euclid(86_400);
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        (second_of_day / 3600) as u32,
        (second_of_day / 60 % 60) as u32,
        (second_of_day % 60) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_print_like_pathlib() {
        let cases = [
            ("out.json", "out.json"),
            ("./out.json", "out.json"),
            ("a//b/./c.json", "a/b/c.json"),
            ("a/b/", "a/b"),
            ("../x", "../x"),
            ("/tmp/x.json", "/tmp/x.json"),
            ("", "."),
            (".", "."),
        ];
        for (given, printed) in cases {
            assert_eq!(
                normalize_like_pathlib(Path::new(given)),
                PathBuf::from(printed),
                "{given}"
            );
        }
    }

    #[test]
    fn default_name_has_the_reference_shape() {
        let name = default_report_file_name();
        let stamp = name
            .strip_prefix(DEFAULT_REPORT_STEM)
            .and_then(|rest| rest.strip_suffix(".json"))
            .unwrap();
        assert_eq!(stamp.len(), 15);
        assert_eq!(&stamp[8..9], "_");
        assert!(stamp
            .chars()
            .filter(|c| *c != '_')
            .all(|c| c.is_ascii_digit()));
    }

    #[test]
    fn utc_conversion_matches_known_dates() {
        assert_eq!(utc_fields(0), (1970, 1, 1, 0, 0, 0));
        // 2026-11-30T04:08:54Z
        assert_eq!(utc_fields(1_796_011_734), (2026, 11, 30, 4, 8, 54));
        // 2000-02-29T23:59:59Z (leap day)
        assert_eq!(utc_fields(951_868_799), (2000, 2, 29, 23, 59, 59));
    }

    #[test]
    fn a_directory_gets_a_timestamped_file_inside() {
        let dir = std::env::temp_dir().join(format!("dynosim-cli-out-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let resolved = resolve_report_path(Some(&dir)).unwrap();
        assert_eq!(resolved.parent(), Some(dir.as_path()));
        assert!(resolved
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(DEFAULT_REPORT_STEM));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn atomic_write_creates_parents_and_overwrites() {
        let dir = std::env::temp_dir().join(format!("dynosim-cli-write-{}", std::process::id()));
        let target = dir.join("nested/deeper/report.json");
        write_atomically(&target, b"first", "report JSON").unwrap();
        write_atomically(&target, b"second", "report JSON").unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "second");
        let leftovers: Vec<_> = fs::read_dir(target.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writing_into_a_file_as_directory_is_a_runtime_error_naming_the_path() {
        let dir = std::env::temp_dir().join(format!("dynosim-cli-bad-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let blocker = dir.join("file");
        fs::write(&blocker, "x").unwrap();
        let target = blocker.join("report.json");
        let err = write_atomically(&target, b"x", "report JSON").unwrap_err();
        assert_eq!(err.exit_code(), 1);
        assert!(
            err.message().contains(&target.display().to_string()),
            "{}",
            err.message()
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
