//! Measured timing tables (`planner_profile_data`, engine.md §2.5): an NPZ archive holding
//! prefill time over new prompt tokens and decode inter-token latency over (active KV tokens,
//! mean context length). Read and checked once, when the engine arguments are parsed; the
//! engine's timing model interpolates them (see `engine::timing`).
//!
//! INTERFACE: [`ProfileTable::load`] reads what `planner_profile_data` names (an NPZ file, or
//! a profiler results directory converted by `profiler_results`); [`ProfileTable::from_npz`]
//! reads and validates a file (every fault names the file and the key); [`ProfileTable::from_arrays`] checks tables given directly; [`ProfileTable::prefill_ms_at`] and [`ProfileTable::decode_ms_at`]
//! evaluate the tables with linear / bilinear interpolation that extends the outermost
//! segments beyond the axes (extrapolation), without floors (the timing model applies them).

use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

/// The NPZ keys, in the order they are checked.
pub const PREFILL_ISL: &str = "prefill_isl";
pub const PREFILL_TTFT_MS: &str = "prefill_ttft_ms";
pub const DECODE_ACTIVE_KV_TOKENS: &str = "decode_active_kv_tokens";
pub const DECODE_CONTEXT_LENGTH: &str = "decode_context_length";
pub const DECODE_ITL: &str = "decode_itl";

/// Validated profile tables. Axes are finite, strictly increasing and at least two points
/// long; every value is finite.
#[derive(Clone, PartialEq)]
pub struct ProfileTable {
    path: PathBuf,
    prefill_tokens: Vec<f64>,
    prefill_ms: Vec<f64>,
    decode_active_kv_tokens: Vec<f64>,
    decode_context_length: Vec<f64>,
    /// Row-major: `decode_itl[i * len(context) + j]` is at (active[i], context[j]).
    decode_itl: Vec<f64>,
}

impl fmt::Debug for ProfileTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ProfileTable({}: prefill {} points, decode {}x{})",
            self.path.display(),
            self.prefill_tokens.len(),
            self.decode_active_kv_tokens.len(),
            self.decode_context_length.len()
        )
    }
}

/// One array read from the archive: its shape and its values as f64.
pub(super) struct NpyArray {
    pub(super) shape: Vec<u64>,
    pub(super) values: Vec<f64>,
}

impl ProfileTable {
    /// Reads and checks `path`. The message names the file and, where one is at fault, the key.
    pub fn from_npz(path: &Path) -> Result<Self, String> {
        let at = |message: String| format!("{}: {message}", path.display());
        let mut archive = open_npz(path).map_err(&at)?;
        let mut read = |key: &str| read_array(&mut archive, key).map_err(&at);

        let prefill_tokens = read(PREFILL_ISL)?;
        let prefill_ms = read(PREFILL_TTFT_MS)?;
        let active = read(DECODE_ACTIVE_KV_TOKENS)?;
        let context = read(DECODE_CONTEXT_LENGTH)?;
        let itl = read(DECODE_ITL)?;
        for (key, array) in [
            (PREFILL_ISL, &prefill_tokens),
            (PREFILL_TTFT_MS, &prefill_ms),
            (DECODE_ACTIVE_KV_TOKENS, &active),
            (DECODE_CONTEXT_LENGTH, &context),
        ] {
            check_one_dimensional(key, array).map_err(at)?;
        }
        let expected = [active.values.len() as u64, context.values.len() as u64];
        if itl.shape != expected {
            return Err(at(format!(
                "key '{DECODE_ITL}' has shape {:?}, expected {:?} (len({DECODE_ACTIVE_KV_TOKENS}) \
                 x len({DECODE_CONTEXT_LENGTH}))",
                itl.shape, expected
            )));
        }
        Self::checked(
            path,
            prefill_tokens.values,
            prefill_ms.values,
            active.values,
            context.values,
            itl.values,
        )
        .map_err(at)
    }

    /// Tables given directly (`decode_itl` as rows over `decode_active_kv_tokens`, each row over
    /// `decode_context_length`), with the same checks as [`ProfileTable::from_npz`].
    pub fn from_arrays(
        prefill_isl: Vec<f64>,
        prefill_ttft_ms: Vec<f64>,
        decode_active_kv_tokens: Vec<f64>,
        decode_context_length: Vec<f64>,
        decode_itl: Vec<Vec<f64>>,
    ) -> Result<Self, String> {
        if decode_itl.len() != decode_active_kv_tokens.len()
            || decode_itl
                .iter()
                .any(|row| row.len() != decode_context_length.len())
        {
            return Err(format!(
                "key '{DECODE_ITL}' must have {} rows of {} values",
                decode_active_kv_tokens.len(),
                decode_context_length.len()
            ));
        }
        Self::checked(
            Path::new("<arrays>"),
            prefill_isl,
            prefill_ttft_ms,
            decode_active_kv_tokens,
            decode_context_length,
            decode_itl.concat(),
        )
    }

    /// The checks shared by every constructor (shapes already agree for the decode grid).
    pub(super) fn checked(
        path: &Path,
        prefill_tokens: Vec<f64>,
        prefill_ms: Vec<f64>,
        active: Vec<f64>,
        context: Vec<f64>,
        itl: Vec<f64>,
    ) -> Result<Self, String> {
        check_axis(PREFILL_ISL, &prefill_tokens)?;
        if prefill_ms.len() != prefill_tokens.len() {
            return Err(format!(
                "key '{PREFILL_TTFT_MS}' has {} values but '{PREFILL_ISL}' has {}; they must \
                 have the same length",
                prefill_ms.len(),
                prefill_tokens.len()
            ));
        }
        check_finite(PREFILL_TTFT_MS, &prefill_ms)?;
        check_axis(DECODE_ACTIVE_KV_TOKENS, &active)?;
        check_axis(DECODE_CONTEXT_LENGTH, &context)?;
        check_finite(DECODE_ITL, &itl)?;
        Ok(Self {
            path: path.to_path_buf(),
            prefill_tokens,
            prefill_ms,
            decode_active_kv_tokens: active,
            decode_context_length: context,
            decode_itl: itl,
        })
    }

    /// The file the tables came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Prefill time (ms) for `tokens` new prompt tokens, interpolated linearly and extended
    /// beyond the table along its first and last segments.
    pub fn prefill_ms_at(&self, tokens: f64) -> f64 {
        let i = segment(&self.prefill_tokens, tokens);
        let (x0, x1) = (self.prefill_tokens[i], self.prefill_tokens[i + 1]);
        let (y0, y1) = (self.prefill_ms[i], self.prefill_ms[i + 1]);
        lerp(x0, y0, x1, y1, tokens)
    }

    /// Decode inter-token latency (ms) at (`active_kv_tokens`, `context_length`),
    /// interpolated bilinearly and extended beyond the grid along its edge cells.
    pub fn decode_ms_at(&self, active_kv_tokens: f64, context_length: f64) -> f64 {
        let columns = self.decode_context_length.len();
        let i = segment(&self.decode_active_kv_tokens, active_kv_tokens);
        let j = segment(&self.decode_context_length, context_length);
        let z = |row: usize, column: usize| self.decode_itl[row * columns + column];
        let (x0, x1) = (
            self.decode_active_kv_tokens[i],
            self.decode_active_kv_tokens[i + 1],
        );
        let (c0, c1) = (
            self.decode_context_length[j],
            self.decode_context_length[j + 1],
        );
        // Along the context axis on both bounding rows, then along the active-KV axis.
        let low = lerp(c0, z(i, j), c1, z(i, j + 1), context_length);
        let high = lerp(c0, z(i + 1, j), c1, z(i + 1, j + 1), context_length);
        lerp(x0, low, x1, high, active_kv_tokens)
    }
}

/// The index `i` of the segment `[axis[i], axis[i + 1]]` used for `x`: the one holding it, or
/// the first / last segment when `x` lies outside the axis.
fn segment(axis: &[f64], x: f64) -> usize {
    let last = axis.len() - 2;
    axis.partition_point(|&point| point <= x)
        .saturating_sub(1)
        .min(last)
}

fn lerp(x0: f64, y0: f64, x1: f64, y1: f64, x: f64) -> f64 {
    y0 + (x - x0) * (y1 - y0) / (x1 - x0)
}

fn check_one_dimensional(key: &str, array: &NpyArray) -> Result<(), String> {
    if array.shape.len() != 1 {
        return Err(format!(
            "key '{key}' must be a 1-D array, got shape {:?}",
            array.shape
        ));
    }
    Ok(())
}

fn check_finite(key: &str, values: &[f64]) -> Result<(), String> {
    match values.iter().position(|value| !value.is_finite()) {
        Some(index) => Err(format!(
            "key '{key}' holds a non-finite value ({}) at index {index}",
            values[index]
        )),
        None => Ok(()),
    }
}

fn check_axis(key: &str, values: &[f64]) -> Result<(), String> {
    if values.len() < 2 {
        return Err(format!(
            "key '{key}' needs at least 2 points to interpolate, got {}",
            values.len()
        ));
    }
    check_finite(key, values)?;
    if let Some(index) = values.windows(2).position(|pair| pair[1] <= pair[0]) {
        return Err(format!(
            "key '{key}' must be strictly increasing, but value {} at index {} is followed by {}",
            values[index],
            index,
            values[index + 1]
        ));
    }
    Ok(())
}

/// Opens an NPZ (zip) archive for [`read_array`]; the message does not name the file.
pub(super) fn open_npz(path: &Path) -> Result<zip::ZipArchive<BufReader<File>>, String> {
    let file = File::open(path).map_err(|error| format!("cannot open: {error}"))?;
    zip::ZipArchive::new(BufReader::new(file))
        .map_err(|error| format!("not a readable NPZ (zip) archive: {error}"))
}

/// Reads `key` (stored as `key.npy`) as f64 values. Floating and integer arrays are accepted.
pub(super) fn read_array<R: Read + Seek>(
    archive: &mut zip::ZipArchive<R>,
    key: &str,
) -> Result<NpyArray, String> {
    let member = format!("{key}.npy");
    if archive.index_for_name(&member).is_none() {
        let mut keys: Vec<String> = archive
            .file_names()
            .map(|name| name.strip_suffix(".npy").unwrap_or(name).to_string())
            .collect();
        keys.sort();
        return Err(format!(
            "missing key '{key}' (the archive holds: {})",
            if keys.is_empty() {
                "nothing".to_string()
            } else {
                keys.join(", ")
            }
        ));
    }
    let entry = archive
        .by_name(&member)
        .map_err(|error| format!("cannot read key '{key}': {error}"))?;
    let npy = npyz::NpyFile::new(entry)
        .map_err(|error| format!("key '{key}' is not a readable .npy array: {error}"))?;
    let shape = npy.shape().to_vec();
    let bad_type = |npy: &npyz::NpyFile<_>| {
        format!(
            "key '{key}' must hold numbers (float or integer), got dtype {}",
            npy.dtype().descr()
        )
    };
    let type_str = match npy.dtype() {
        npyz::DType::Plain(type_str) => type_str,
        _ => return Err(bad_type(&npy)),
    };
    let read_error = |error: std::io::Error| format!("cannot read key '{key}': {error}");
    let values = match (type_str.type_char(), type_str.size_field()) {
        (npyz::TypeChar::Float, 8) => npy.into_vec::<f64>().map_err(read_error)?,
        (npyz::TypeChar::Float, 4) => npy
            .into_vec::<f32>()
            .map_err(read_error)?
            .into_iter()
            .map(f64::from)
            .collect(),
        (npyz::TypeChar::Int, 8) => npy
            .into_vec::<i64>()
            .map_err(read_error)?
            .into_iter()
            .map(|value| value as f64)
            .collect(),
        (npyz::TypeChar::Int, 4) => npy
            .into_vec::<i32>()
            .map_err(read_error)?
            .into_iter()
            .map(f64::from)
            .collect(),
        (npyz::TypeChar::Uint, 8) => npy
            .into_vec::<u64>()
            .map_err(read_error)?
            .into_iter()
            .map(|value| value as f64)
            .collect(),
        _ => return Err(bad_type(&npy)),
    };
    Ok(NpyArray { shape, values })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> ProfileTable {
        ProfileTable {
            path: PathBuf::from("t.npz"),
            prefill_tokens: vec![100.0, 1000.0, 4000.0],
            prefill_ms: vec![10.0, 20.0, 80.0],
            decode_active_kv_tokens: vec![0.0, 1000.0],
            decode_context_length: vec![100.0, 200.0, 400.0],
            decode_itl: vec![5.0, 6.0, 8.0, 7.0, 8.0, 10.0],
        }
    }

    #[test]
    fn prefill_interpolates_and_extrapolates_linearly() {
        let t = table();
        assert_eq!(t.prefill_ms_at(100.0), 10.0);
        assert_eq!(t.prefill_ms_at(550.0), 15.0);
        assert_eq!(t.prefill_ms_at(1000.0), 20.0);
        assert_eq!(t.prefill_ms_at(2500.0), 50.0);
        // Beyond both ends along the outer segments.
        assert_eq!(t.prefill_ms_at(7000.0), 140.0);
        assert!((t.prefill_ms_at(0.0) - 80.0 / 9.0).abs() < 1e-12);
    }

    #[test]
    fn decode_is_bilinear_with_extrapolation() {
        let t = table();
        assert_eq!(t.decode_ms_at(0.0, 100.0), 5.0);
        assert_eq!(t.decode_ms_at(1000.0, 400.0), 10.0);
        assert_eq!(t.decode_ms_at(500.0, 150.0), 6.5);
        assert_eq!(t.decode_ms_at(500.0, 300.0), 8.0);
        assert_eq!(t.decode_ms_at(2000.0, 100.0), 9.0);
        assert_eq!(t.decode_ms_at(0.0, 800.0), 12.0);
    }

    #[test]
    fn axes_must_be_strictly_increasing_finite_and_long_enough() {
        assert!(check_axis("k", &[1.0, 2.0]).is_ok());
        let message = check_axis("k", &[1.0, 1.0]).unwrap_err();
        assert!(message.contains("strictly increasing"), "{message}");
        assert!(check_axis("k", &[2.0, 1.0]).is_err());
        assert!(check_axis("k", &[1.0]).unwrap_err().contains("at least 2"));
        assert!(check_axis("k", &[1.0, f64::NAN])
            .unwrap_err()
            .contains("non-finite"));
    }
}
