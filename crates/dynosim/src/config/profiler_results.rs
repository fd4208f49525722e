//! A profiler results directory as `planner_profile_data`: the reference's pre-deployment
//! profiler writes its measurements there, and its mocker turns them into the engine timing
//! tables of [`ProfileTable`] before a run. dynosim reads the same directory.
//!
//! Layout (each side is looked for as NPZ first, then as JSON, independently):
//! - prefill: `selected_prefill_interpolation/raw_data.npz` or `prefill_raw_data.json`, with
//!   `prefill_isl` (prompt tokens) and `prefill_ttft` (ms) at the same points (the profiler's
//!   `prefill_thpt_per_gpu` may be there too; it is not a timing input);
//! - decode: `selected_decode_interpolation/raw_data.npz` or `decode_raw_data.json`, with
//!   scattered points `x_kv_usage` (fraction of the KV cache in use), `y_context_length`
//!   (tokens) and `z_itl` (ms), and `max_kv_tokens` (the KV capacity behind `x_kv_usage`; a
//!   one-element array in the NPZ, a number in the JSON).
//!
//! Conversion, onto the grid the reference builds (100 points per axis):
//! - prefill: ISL from the smallest to the largest measured one, TTFT from a cubic spline
//!   through the measurements with not-a-knot ends (the reference's cubic `interp1d`), so the
//!   table holds the same values as the reference's;
//! - decode: KV tokens from 0 to `max_kv_tokens`, context length from 0 to the largest
//!   measured one; the ITL at each grid point is interpolated piecewise linearly from the
//!   measurements: along the KV axis within each measured context length (held at the nearest
//!   measurement beyond its ends), then between the two nearest context lengths (held beyond
//!   the first and last). The reference fits a cubic surface over a triangulation instead
//!   (scipy's `griddata`), so decode tables agree at the measured points and differ slightly
//!   between them (docs/differences.md).
//!
//! INTERFACE: [`table_from_directory`] (called by [`ProfileTable::load`], defined here: a
//! directory or else an NPZ file); every fault names the
//! file and the key, or says which files were looked for.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::profile_table::{open_npz, read_array, ProfileTable};

impl ProfileTable {
    /// Reads and checks what `planner_profile_data` names: a profiler results directory
    /// (see [`table_from_directory`]) or else an NPZ file of the tables themselves.
    pub fn load(path: &Path) -> Result<Self, String> {
        if path.is_dir() {
            table_from_directory(path)
        } else {
            Self::from_npz(path)
        }
    }
}

/// Points per axis of the converted tables (the reference's default resolution).
const RESOLUTION: usize = 100;

const PREFILL_NPZ: &str = "selected_prefill_interpolation/raw_data.npz";
const PREFILL_JSON: &str = "prefill_raw_data.json";
const DECODE_NPZ: &str = "selected_decode_interpolation/raw_data.npz";
const DECODE_JSON: &str = "decode_raw_data.json";

/// Reads a profiler results directory and converts it to timing tables.
pub(super) fn table_from_directory(dir: &Path) -> Result<ProfileTable, String> {
    let prefill_file = pick(dir, PREFILL_NPZ, PREFILL_JSON)?;
    let decode_file = pick(dir, DECODE_NPZ, DECODE_JSON)?;
    let prefill = read_prefill(&prefill_file)?;
    let decode = read_decode(&decode_file)?;

    let (isl, ttft) = prefill_table(&prefill).map_err(|m| at(&prefill_file, m))?;
    let (active, context, itl) = decode_table(&decode).map_err(|m| at(&decode_file, m))?;
    ProfileTable::checked(dir, isl, ttft, active, context, itl)
        .map_err(|message| format!("{}: converted tables: {message}", dir.display()))
}

fn at(file: &Path, message: String) -> String {
    format!("{}: {message}", file.display())
}

/// The NPZ when it exists, else the JSON, else an error naming both.
fn pick(dir: &Path, npz: &str, json: &str) -> Result<PathBuf, String> {
    let npz_path = dir.join(npz);
    if npz_path.is_file() {
        return Ok(npz_path);
    }
    let json_path = dir.join(json);
    if json_path.is_file() {
        return Ok(json_path);
    }
    Err(format!(
        "{}: is a directory but not a profiler results directory: it holds neither {npz} nor \
         {json} (planner_profile_data is an .npz file with keys prefill_isl, prefill_ttft_ms, \
         decode_active_kv_tokens, decode_context_length, decode_itl, or the directory the \
         profiler wrote, with {PREFILL_NPZ} or {PREFILL_JSON} and {DECODE_NPZ} or {DECODE_JSON})",
        dir.display()
    ))
}

struct Prefill {
    isl: Vec<f64>,
    ttft_ms: Vec<f64>,
}

struct Decode {
    kv_usage: Vec<f64>,
    context_length: Vec<f64>,
    itl_ms: Vec<f64>,
    max_kv_tokens: f64,
}

/// The named 1-D arrays of one results file (NPZ or JSON).
struct ResultsFile<'a> {
    path: &'a Path,
    json: Option<serde_json::Map<String, Value>>,
}

impl<'a> ResultsFile<'a> {
    fn open(path: &'a Path) -> Result<Self, String> {
        if path.extension().is_some_and(|ext| ext == "json") {
            let text = std::fs::read_to_string(path)
                .map_err(|error| at(path, format!("cannot read: {error}")))?;
            match serde_json::from_str(&text) {
                Ok(Value::Object(object)) => Ok(Self {
                    path,
                    json: Some(object),
                }),
                Ok(_) => Err(at(path, "must hold a JSON object".into())),
                Err(error) => Err(at(path, format!("invalid JSON: {error}"))),
            }
        } else {
            open_npz(path).map_err(|message| at(path, message))?;
            Ok(Self { path, json: None })
        }
    }

    /// The values of `key` flattened, with the array's dimensionality.
    fn array(&self, key: &str) -> Result<(usize, Vec<f64>), String> {
        match &self.json {
            None => {
                let mut archive = open_npz(self.path).map_err(|m| at(self.path, m))?;
                let array = read_array(&mut archive, key).map_err(|m| at(self.path, m))?;
                Ok((array.shape.len(), array.values))
            }
            Some(object) => {
                let value = object.get(key).ok_or_else(|| {
                    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
                    keys.sort_unstable();
                    at(
                        self.path,
                        format!("missing key '{key}' (the file holds: {})", keys.join(", ")),
                    )
                })?;
                json_numbers(value)
                    .map(|values| (if value.is_array() { 1 } else { 0 }, values))
                    .ok_or_else(|| {
                        at(
                            self.path,
                            format!("key '{key}' must be a number or a flat list of numbers"),
                        )
                    })
            }
        }
    }

    /// A 1-D array of `key`, all finite.
    fn vector(&self, key: &str) -> Result<Vec<f64>, String> {
        let (dimensions, values) = self.array(key)?;
        if dimensions != 1 {
            return Err(at(self.path, format!("key '{key}' must be a 1-D array")));
        }
        if let Some(index) = values.iter().position(|value| !value.is_finite()) {
            return Err(at(
                self.path,
                format!("key '{key}' holds a non-finite value at index {index}"),
            ));
        }
        Ok(values)
    }
}

fn json_numbers(value: &Value) -> Option<Vec<f64>> {
    match value {
        Value::Number(number) => number.as_f64().map(|x| vec![x]),
        Value::Array(items) => items.iter().map(Value::as_f64).collect(),
        _ => None,
    }
}

fn read_prefill(path: &Path) -> Result<Prefill, String> {
    let file = ResultsFile::open(path)?;
    let isl = file.vector("prefill_isl")?;
    let ttft_ms = file.vector("prefill_ttft")?;
    if isl.len() != ttft_ms.len() {
        return Err(at(
            path,
            format!(
                "key 'prefill_ttft' has {} values but 'prefill_isl' has {}; they must have the \
                 same length",
                ttft_ms.len(),
                isl.len()
            ),
        ));
    }
    Ok(Prefill { isl, ttft_ms })
}

fn read_decode(path: &Path) -> Result<Decode, String> {
    let file = ResultsFile::open(path)?;
    let kv_usage = file.vector("x_kv_usage")?;
    let context_length = file.vector("y_context_length")?;
    let itl_ms = file.vector("z_itl")?;
    if context_length.len() != kv_usage.len() || itl_ms.len() != kv_usage.len() {
        return Err(at(
            path,
            format!(
                "keys 'x_kv_usage', 'y_context_length' and 'z_itl' must have the same length, \
                 got {}, {} and {}",
                kv_usage.len(),
                context_length.len(),
                itl_ms.len()
            ),
        ));
    }
    if kv_usage.is_empty() {
        return Err(at(path, "key 'x_kv_usage' holds no measurement".into()));
    }
    let (_, max_kv) = file.array("max_kv_tokens")?;
    let max_kv_tokens = match max_kv.first() {
        Some(&value) if value.is_finite() && value > 0.0 => value,
        _ => {
            return Err(at(
                path,
                "key 'max_kv_tokens' must be a positive number (the KV cache's capacity in \
                 tokens)"
                    .into(),
            ))
        }
    };
    Ok(Decode {
        kv_usage,
        context_length,
        itl_ms,
        max_kv_tokens,
    })
}

/// `count` evenly spaced values from `start` to `stop`, both included, computed as numpy's
/// `linspace` computes them (so the axes equal the reference's bit for bit).
fn linspace(start: f64, stop: f64, count: usize) -> Vec<f64> {
    let step = (stop - start) / (count - 1) as f64;
    let mut values: Vec<f64> = (0..count).map(|k| k as f64 * step + start).collect();
    values[count - 1] = stop;
    values
}

/// The prefill table: the measured ISL range resampled on [`RESOLUTION`] points of the cubic
/// spline through the measurements.
fn prefill_table(prefill: &Prefill) -> Result<(Vec<f64>, Vec<f64>), String> {
    let mut points: Vec<(f64, f64)> = prefill
        .isl
        .iter()
        .copied()
        .zip(prefill.ttft_ms.iter().copied())
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    if points.windows(2).any(|pair| pair[0].0 == pair[1].0) {
        return Err("key 'prefill_isl' holds the same ISL twice".into());
    }
    if points.len() < 4 {
        return Err(format!(
            "key 'prefill_isl' needs at least 4 measurements for the cubic fit, got {}",
            points.len()
        ));
    }
    let (xs, ys): (Vec<f64>, Vec<f64>) = points.into_iter().unzip();
    let spline = NotAKnotSpline::new(&xs, &ys);
    let grid = linspace(xs[0], xs[xs.len() - 1], RESOLUTION);
    let values = grid.iter().map(|&x| spline.at(x)).collect();
    Ok((grid, values))
}

/// A decode table: the active-KV-token axis, the context-length axis, and the ITL values in
/// rows over the first axis.
type DecodeGrid = (Vec<f64>, Vec<f64>, Vec<f64>);

/// The decode table on the reference's grid (see the module docs), rows over KV tokens.
fn decode_table(decode: &Decode) -> Result<DecodeGrid, String> {
    // Measurements grouped by context length, each group sorted along KV use.
    let mut order: Vec<usize> = (0..decode.kv_usage.len()).collect();
    order.sort_by(|&a, &b| {
        decode.context_length[a]
            .total_cmp(&decode.context_length[b])
            .then(decode.kv_usage[a].total_cmp(&decode.kv_usage[b]))
    });
    let mut rows: Vec<(f64, Vec<(f64, f64)>)> = Vec::new();
    for index in order {
        let context = decode.context_length[index];
        let point = (decode.kv_usage[index], decode.itl_ms[index]);
        match rows.last_mut() {
            Some((last, points)) if *last == context => points.push(point),
            _ => rows.push((context, vec![point])),
        }
    }
    let max_context = rows[rows.len() - 1].0;
    if max_context <= 0.0 {
        return Err("key 'y_context_length' must hold a positive context length".into());
    }
    let usage_axis = linspace(0.0, 1.0, RESOLUTION);
    let context_axis = linspace(0.0, max_context, RESOLUTION);
    let mut itl = Vec::with_capacity(RESOLUTION * RESOLUTION);
    for &usage in &usage_axis {
        let along_rows: Vec<(f64, f64)> = rows
            .iter()
            .map(|(context, points)| (*context, held_linear(points, usage)))
            .collect();
        itl.extend(context_axis.iter().map(|&c| held_linear(&along_rows, c)));
    }
    let active = usage_axis
        .iter()
        .map(|usage| usage * decode.max_kv_tokens)
        .collect();
    Ok((active, context_axis, itl))
}

/// Linear interpolation through `points` (sorted by x, distinct x), held at the first and last
/// value beyond them; a single point is a constant.
fn held_linear(points: &[(f64, f64)], x: f64) -> f64 {
    let after = points.partition_point(|&(px, _)| px <= x);
    if after == 0 {
        return points[0].1;
    }
    if after == points.len() {
        return points[points.len() - 1].1;
    }
    let (x0, y0) = points[after - 1];
    let (x1, y1) = points[after];
    y0 + (x - x0) * (y1 - y0) / (x1 - x0)
}

/// An interpolating cubic spline whose third derivative is continuous across the second and
/// the second-to-last knots ("not-a-knot" ends). Needs at least 4 strictly increasing knots.
struct NotAKnotSpline {
    xs: Vec<f64>,
    ys: Vec<f64>,
    /// Second derivative at each knot.
    curvature: Vec<f64>,
}

impl NotAKnotSpline {
    fn new(xs: &[f64], ys: &[f64]) -> Self {
        let n = xs.len();
        let h: Vec<f64> = xs.windows(2).map(|pair| pair[1] - pair[0]).collect();
        // The n linear equations for the knots' second derivatives, as a dense system (n is a
        // profiler's handful of ISLs): continuity of the first derivative at interior knots,
        // plus the two not-a-knot conditions.
        let mut matrix = vec![vec![0.0; n]; n];
        let mut rhs = vec![0.0; n];
        matrix[0][0] = h[1];
        matrix[0][1] = -(h[0] + h[1]);
        matrix[0][2] = h[0];
        for i in 1..n - 1 {
            matrix[i][i - 1] = h[i - 1];
            matrix[i][i] = 2.0 * (h[i - 1] + h[i]);
            matrix[i][i + 1] = h[i];
            rhs[i] = 6.0 * ((ys[i + 1] - ys[i]) / h[i] - (ys[i] - ys[i - 1]) / h[i - 1]);
        }
        matrix[n - 1][n - 3] = h[n - 2];
        matrix[n - 1][n - 2] = -(h[n - 3] + h[n - 2]);
        matrix[n - 1][n - 1] = h[n - 3];
        let curvature = solve(matrix, rhs);
        Self {
            xs: xs.to_vec(),
            ys: ys.to_vec(),
            curvature,
        }
    }

    /// The spline at `x` (inside the knots' range).
    fn at(&self, x: f64) -> f64 {
        let last = self.xs.len() - 2;
        let i = self
            .xs
            .partition_point(|&knot| knot <= x)
            .saturating_sub(1)
            .min(last);
        let (x0, x1) = (self.xs[i], self.xs[i + 1]);
        let (y0, y1) = (self.ys[i], self.ys[i + 1]);
        let (m0, m1) = (self.curvature[i], self.curvature[i + 1]);
        let h = x1 - x0;
        let (left, right) = (x1 - x, x - x0);
        m0 * left.powi(3) / (6.0 * h)
            + m1 * right.powi(3) / (6.0 * h)
            + (y0 / h - m0 * h / 6.0) * left
            + (y1 / h - m1 * h / 6.0) * right
    }
}

/// Solves `matrix · x = rhs` by Gaussian elimination with partial pivoting. The spline's
/// system is non-singular for strictly increasing knots.
fn solve(mut matrix: Vec<Vec<f64>>, mut rhs: Vec<f64>) -> Vec<f64> {
    let n = rhs.len();
    for column in 0..n {
        let pivot = (column..n)
            .max_by(|&a, &b| matrix[a][column].abs().total_cmp(&matrix[b][column].abs()))
            .unwrap_or(column);
        matrix.swap(column, pivot);
        rhs.swap(column, pivot);
        for row in column + 1..n {
            let factor = matrix[row][column] / matrix[column][column];
            if factor != 0.0 {
                let pivot_row = matrix[column].clone();
                for (cell, pivot_cell) in matrix[row][column..].iter_mut().zip(&pivot_row[column..])
                {
                    *cell -= factor * pivot_cell;
                }
                rhs[row] -= factor * rhs[column];
            }
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let known: f64 = (row + 1..n).map(|k| matrix[row][k] * x[k]).sum();
        x[row] = (rhs[row] - known) / matrix[row][row];
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_json(dir: &Path, name: &str, value: serde_json::Value) {
        std::fs::write(dir.join(name), value.to_string()).unwrap();
    }

    /// A small .npy (format 1.0, little-endian float64) of `values` with `shape`.
    fn npy(values: &[f64], shape: &[usize]) -> Vec<u8> {
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        let shape_text = if dims.len() == 1 {
            format!("({},)", dims[0])
        } else {
            format!("({})", dims.join(", "))
        };
        let mut header =
            format!("{{'descr': '<f8', 'fortran_order': False, 'shape': {shape_text}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        for value in values {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
        bytes
    }

    fn write_npz(path: &Path, arrays: &[(&str, Vec<f64>)]) {
        use std::io::Write;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
        for (key, values) in arrays {
            zip.start_file(
                format!("{key}.npy"),
                zip::write::SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Stored),
            )
            .unwrap();
            zip.write_all(&npy(values, &[values.len()])).unwrap();
        }
        zip.finish().unwrap();
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "dynosim-profiler-results-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Prefill TTFT = 5 + 0.01·ISL + 1e-6·ISL² (a cubic spline reproduces a quadratic exactly);
    /// decode ITL = 4 + 6·usage + 0.001·context, measured at two context lengths.
    fn json_results(dir: &Path) {
        let isl = [100.0, 500.0, 1000.0, 2000.0, 4000.0];
        let ttft: Vec<f64> = isl.iter().map(|x| 5.0 + 0.01 * x + 1e-6 * x * x).collect();
        write_json(
            dir,
            PREFILL_JSON,
            serde_json::json!({"prefill_isl": isl, "prefill_ttft": ttft,
                               "prefill_thpt_per_gpu": [1.0, 2.0, 3.0, 4.0, 5.0]}),
        );
        let usage = [0.1, 0.5, 0.9, 0.2, 0.6];
        let context = [1000.0, 1000.0, 1000.0, 3000.0, 3000.0];
        let itl: Vec<f64> = usage
            .iter()
            .zip(context)
            .map(|(u, c)| 4.0 + 6.0 * u + 0.001 * c)
            .collect();
        write_json(
            dir,
            DECODE_JSON,
            serde_json::json!({"x_kv_usage": usage, "y_context_length": context, "z_itl": itl,
                               "z_thpt_per_gpu": [1, 1, 1, 1, 1], "max_kv_tokens": 100000}),
        );
    }

    #[test]
    fn a_json_results_directory_becomes_tables_on_the_reference_grid() {
        let dir = temp_dir("json");
        json_results(&dir);
        let table = ProfileTable::load(&dir).unwrap();
        let quadratic = |x: f64| 5.0 + 0.01 * x + 1e-6 * x * x;
        for isl in [100.0, 777.0, 2500.0, 4000.0] {
            let ms = table.prefill_ms_at(isl);
            assert!((ms - quadratic(isl)).abs() < 0.01, "{isl}: {ms}");
        }
        // Measured points are reproduced where the grid meets them (usage 0.5 of 100,000 KV
        // tokens lies between grid points 49 and 50, so compare at the row's exact values).
        let at = |usage: f64, context: f64| table.decode_ms_at(usage * 100_000.0, context);
        assert!((at(0.1, 1000.0) - (4.0 + 0.6 + 1.0)).abs() < 0.05);
        assert!((at(0.9, 1000.0) - (4.0 + 5.4 + 1.0)).abs() < 0.05);
        // Between the measured context lengths: linear in context.
        assert!(
            (at(0.5, 2000.0) - (4.0 + 3.0 + 2.0)).abs() < 0.1,
            "{}",
            at(0.5, 2000.0)
        );
        // Below the shortest measured context the nearest row holds.
        assert!((at(0.5, 10.0) - (4.0 + 3.0 + 1.0)).abs() < 0.1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn npz_files_are_preferred_and_max_kv_tokens_is_an_array() {
        let dir = temp_dir("npz");
        json_results(&dir);
        // NPZ beside the JSON, with prefill twice as slow: the NPZ wins.
        let isl = vec![100.0, 500.0, 1000.0, 2000.0];
        let ttft: Vec<f64> = isl.iter().map(|x| 2.0 * (1.0 + 0.01 * x)).collect();
        write_npz(
            &dir.join(PREFILL_NPZ),
            &[
                ("prefill_isl", isl),
                ("prefill_ttft", ttft),
                ("prefill_thpt_per_gpu", vec![1.0; 4]),
            ],
        );
        write_npz(
            &dir.join(DECODE_NPZ),
            &[
                ("x_kv_usage", vec![0.0, 1.0, 0.0, 1.0]),
                ("y_context_length", vec![100.0, 100.0, 200.0, 200.0]),
                ("z_itl", vec![5.0, 7.0, 6.0, 9.0]),
                ("z_thpt_per_gpu", vec![1.0; 4]),
                ("max_kv_tokens", vec![8192.0]),
            ],
        );
        let table = ProfileTable::load(&dir).unwrap();
        assert!((table.prefill_ms_at(1500.0) - 32.0).abs() < 1e-9);
        assert!((table.decode_ms_at(8192.0, 200.0) - 9.0).abs() < 1e-9);
        assert!((table.decode_ms_at(0.0, 150.0) - 5.5).abs() < 1e-9);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn faults_name_the_file_and_the_key() {
        let dir = temp_dir("faults");
        let message = ProfileTable::load(&dir).unwrap_err();
        assert!(
            message.contains("not a profiler results directory"),
            "{message}"
        );
        assert!(message.contains(PREFILL_JSON), "{message}");
        json_results(&dir);
        write_json(
            &dir,
            DECODE_JSON,
            serde_json::json!({"x_kv_usage": [0.1], "y_context_length": [5], "z_itl": [1]}),
        );
        let message = ProfileTable::load(&dir).unwrap_err();
        assert!(
            message.ends_with(&format!(
                "{DECODE_JSON}: missing key 'max_kv_tokens' (the file holds: x_kv_usage, \
                 y_context_length, z_itl)"
            )),
            "{message}"
        );
        json_results(&dir);
        write_json(
            &dir,
            PREFILL_JSON,
            serde_json::json!({"prefill_isl": [1, 2, 3], "prefill_ttft": [1, 2, 3]}),
        );
        let message = ProfileTable::load(&dir).unwrap_err();
        assert!(message.contains("at least 4 measurements"), "{message}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_spline_matches_scipys_not_a_knot_cubic() {
        // scipy.interpolate.interp1d(x, y, kind="cubic") at 150, 900 and 2500 (scipy 1.17.1).
        let xs = [100.0, 400.0, 1000.0, 2000.0, 3000.0];
        let ys = [10.0, 13.0, 22.0, 30.0, 55.0];
        let spline = NotAKnotSpline::new(&xs, &ys);
        for (x, expected) in SCIPY_POINTS {
            assert!(
                (spline.at(x) - expected).abs() < 1e-9,
                "{x}: {} vs {expected}",
                spline.at(x)
            );
        }
        for (x, y) in xs.iter().zip(ys) {
            assert!((spline.at(*x) - y).abs() < 1e-9);
        }
    }

    const SCIPY_POINTS: [(f64, f64); 3] = [
        (150.0, 10.314160954785955),
        (900.0, 20.660413660413667),
        (2500.0, 37.952922077922075),
    ];

    #[test]
    fn linspace_is_numpys() {
        let axis = linspace(0.0, 1.0, 100);
        assert_eq!(axis[0], 0.0);
        assert_eq!(axis[99], 1.0);
        assert_eq!(axis[1], 1.0 / 99.0);
        assert_eq!(axis.len(), 100);
        // numpy.linspace(100, 3000, 100)[37]
        assert_eq!(linspace(100.0, 3000.0, 100)[37], 1183.8383838383838);
    }
}
