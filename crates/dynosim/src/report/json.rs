//! The report JSON file, byte-identical to the reference's
//! `json.dumps(report, indent=2, sort_keys=True) + "\n"` (frontend.md §3.7).

use super::{Report, Value};

impl Report {
    /// The report file's content: keys sorted alphabetically, two-space indentation, floats as
    /// Python's `repr` (`1e-09`, `0.0`, `1234.5`), ints as ints, and a trailing newline.
    pub fn to_json_file_string(&self) -> String {
        let mut sorted: Vec<&(&'static str, Value)> = self.entries.iter().collect();
        // Python sorts str keys by code point; the keys are ASCII, so byte order is the same.
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        if sorted.is_empty() {
            return "{}\n".to_string();
        }
        let mut out = String::with_capacity(64 * sorted.len());
        out.push_str("{\n");
        for (i, (key, value)) in sorted.iter().enumerate() {
            if i > 0 {
                out.push_str(",\n");
            }
            out.push_str("  \"");
            out.push_str(key);
            out.push_str("\": ");
            match value {
                Value::Int(v) => out.push_str(&v.to_string()),
                Value::Float(v) => out.push_str(&python_json_float(*v)),
            }
        }
        out.push_str("\n}\n");
        out
    }
}

/// A float as Python's `json.dumps` writes it: `repr` for finite values, and the JavaScript
/// names Python uses for the non-finite ones.
pub fn python_json_float(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
    } else {
        python_float_repr(value)
    }
}

/// Python's `repr(float)`: the shortest digit string that round-trips, written in positional
/// notation when the decimal exponent is in [-4, 16) and in scientific notation (`1e-09`,
/// `1.5e+16`) otherwise; integral values keep a `.0`.
pub fn python_float_repr(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digit count, but when two digit strings of
    // that length are equally close it may pick the upper one, where Python picks the even one.
    // Re-rounding the exact value to that many digits (ties to even) gives Python's choice.
    let shortest = format!("{:e}", value.abs());
    let significant = shortest
        .split_once('e')
        .map_or(1, |(m, _)| m.chars().filter(char::is_ascii_digit).count());
    let scientific = format!("{:.*e}", significant - 1, value.abs());
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` output always has an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` exponent is an integer");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();

    let mut out = String::with_capacity(digits.len() + 8);
    if value.is_sign_negative() {
        out.push('-');
    }
    if !(-4..16).contains(&exponent) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exponent < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exponent.unsigned_abs()));
        return out;
    }
    // Number of digits before the decimal point.
    let point = exponent + 1;
    if point <= 0 {
        out.push_str("0.");
        out.push_str(&"0".repeat((-point) as usize));
        out.push_str(&digits);
    } else {
        let point = point as usize;
        if point >= digits.len() {
            out.push_str(&digits);
            out.push_str(&"0".repeat(point - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_matches_python_on_typical_values() {
        // Expected strings produced by python3 `repr(float(...))`.
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (-1.0, "-1.0"),
            (1e-9, "1e-09"),
            (1e-5, "1e-05"),
            (1e-4, "0.0001"),
            (0.00012345, "0.00012345"),
            (1.2345e-5, "1.2345e-05"),
            (1234.5, "1234.5"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1.5e16, "1.5e+16"),
            (1e16, "1e+16"),
            (9999999999999998.0, "9999999999999998.0"),
            (1234567890123456.0, "1234567890123456.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (1e22, "1e+22"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (2.2250738585072014e-308, "2.2250738585072014e-308"),
            (178.79843000000005, "178.79843000000005"),
            (100.0, "100.0"),
            (1e15, "1000000000000000.0"),
            (0.000999, "0.000999"),
            (1.0 / 3.0, "0.3333333333333333"),
            (2.0 / 3.0 * 1e-7, "6.666666666666665e-08"),
            (6495.625565, "6495.625565"),
            // Two 17-digit strings are equally close; Python keeps the even last digit.
            (f64::from_bits(0x430e_1c6d_958d_7b72), "1059438285926254.2"),
        ];
        for (value, expected) in cases {
            assert_eq!(python_float_repr(*value), *expected, "value {value:e}");
        }
    }

    #[test]
    fn json_float_names_non_finite_values_like_python() {
        assert_eq!(python_json_float(f64::NAN), "NaN");
        assert_eq!(python_json_float(f64::INFINITY), "Infinity");
        assert_eq!(python_json_float(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(python_json_float(2.5), "2.5");
    }

    #[test]
    fn file_string_sorts_keys_and_indents_like_json_dumps() {
        let report = Report {
            entries: vec![
                ("num_requests", Value::Int(16)),
                ("duration_ms", Value::Float(8659.17)),
                ("decode_worker_seconds", Value::Float(1e-9)),
            ],
        };
        assert_eq!(
            report.to_json_file_string(),
            "{\n  \"decode_worker_seconds\": 1e-09,\n  \"duration_ms\": 8659.17,\n  \"num_requests\": 16\n}\n"
        );
    }
}

#[cfg(test)]
mod python_parity {
    use super::super::table::format_thousands_2f;
    use super::*;

    /// Checks the float formatters against python3's own output, committed as
    /// `testdata/float_cases.txt` (lines `<f64 bits hex> <repr(v)> <f"{v:,.2f}">`, written by
    /// `testdata/make_float_cases.py`).
    #[test]
    fn formatters_match_python_on_case_file() {
        let text = include_str!("testdata/float_cases.txt");
        let mut checked = 0;
        for line in text.lines() {
            let mut parts = line.split(' ');
            let bits = u64::from_str_radix(parts.next().unwrap(), 16).unwrap();
            let value = f64::from_bits(bits);
            assert_eq!(python_float_repr(value), parts.next().unwrap(), "{line}");
            assert_eq!(format_thousands_2f(value), parts.next().unwrap(), "{line}");
            checked += 1;
        }
        assert!(checked > 1000, "{checked} cases");
    }
}
