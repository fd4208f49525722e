//! Output files: where the report goes (frontend.md §3.7) and how files are written.
//!
//! Files are written to a temporary sibling and renamed into place, so a reader (or a crash)
//! never sees a half-written report.

use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use dynosim::{Error, RequestRecord, Result};

/// Stem of the default report file name; the local time `%Y%m%d_%H%M%S` and `.json` follow.
const DEFAULT_REPORT_STEM: &str = "dynamo_replay_report_";

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
                Error::runtime(format!("cannot determine the current directory: {err}"))
            })?;
            Ok(cwd.join(default_report_file_name()))
        }
        Some(path) => {
            let path = normalize_like_pathlib(path);
            if path.is_dir() {
                Ok(join_like_pathlib(&path, &default_report_file_name()))
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

/// Rejects a per-request JSONL path that can never be written (an existing directory) before
/// any simulation work, as a usage error naming the flag.
pub fn check_jsonl_path(flag: &str, path: Option<&Path>) -> Result<()> {
    match path {
        Some(path) if path.is_dir() => Err(Error::usage(format!(
            "{flag}: {} is a directory; give a file path",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Writes the per-request records, one compact JSON object per line.
pub fn write_jsonl(path: &Path, records: &[RequestRecord]) -> Result<()> {
    let mut text = String::new();
    for record in records {
        text.push_str(&record.to_json_line());
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    write_atomically(path, text.as_bytes(), "per-request JSONL")
}

/// Writes `contents` to `path` through a temporary file in the same directory, creating
/// missing parent directories first. Failures are runtime errors naming the path.
pub fn write_atomically(path: &Path, contents: &[u8], what: &str) -> Result<()> {
    let fail = |err: std::io::Error| {
        Error::runtime(format!(
            "cannot write the {what} to {}: {err}",
            path.display()
        ))
    };
    let file_name = path.file_name().ok_or_else(|| {
        Error::runtime(format!(
            "cannot write the {what} to {}: not a file path",
            path.display()
        ))
    })?;
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(fail)?;
    if path.is_dir() {
        return Err(Error::runtime(format!(
            "cannot write the {what} to {}: it is a directory",
            path.display()
        )));
    }

    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(file_name);
    temp_name.push(format!(".{}.tmp", std::process::id()));
    let temp_path = parent.join(temp_name);
    let written = fs::File::create(&temp_path)
        .and_then(|mut file| file.write_all(contents).and_then(|()| file.flush()))
        .and_then(|()| fs::rename(&temp_path, path));
    if let Err(err) = written {
        let _ = fs::remove_file(&temp_path);
        return Err(fail(err));
    }
    Ok(())
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
