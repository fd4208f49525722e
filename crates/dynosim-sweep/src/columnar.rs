//! `results.parquet`: the rows and columns of `results.csv`, typed, for dataframe tools.
//!
//! INTERFACE
//! - [`columns`]: the table's columns (named and ordered as in `results.csv`), each with its
//!   cells as JSON values (`None` where the CSV cell is empty because there is no value).
//! - [`parquet_bytes`]: the Parquet file of those columns, one row group, uncompressed.
//!
//! Each column's Parquet type follows its values: all booleans → BOOLEAN, all integers →
//! INT64, all numbers → DOUBLE, anything else (strings, and mappings or lists as their JSON
//! text, as in the CSV) → UTF-8 strings; a column without any value is a UTF-8 column of
//! nulls. Every column is OPTIONAL (a failed row has no report values, a rejected one no GPU
//! count), so an empty CSV cell is a null, except `error`, whose empty string means "it ran".

use std::sync::Arc;

use dynosim::report::key_order;
use dynosim::{Error, Result};
use parquet::basic::{LogicalType, Repetition, Type as PhysicalType};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;
use serde_json::Value;

use crate::objectives::feasible;
use crate::row::{cell, Row};
use crate::spec::SweepSpec;

/// One column of the table.
pub struct Column {
    pub name: String,
    pub cells: Vec<Option<Value>>,
}

/// The columns of `results.csv` for `rows`, in its order: `candidate`, the swept keys,
/// `gpus`, `feasible`, `error`, then the report keys.
pub fn columns(spec: &SweepSpec, rows: &[Row]) -> Vec<Column> {
    let with_goodput = rows
        .iter()
        .any(|row| row.report.contains_key("goodput_completed_requests"));
    let mut columns = vec![Column {
        name: "candidate".into(),
        cells: rows
            .iter()
            .map(|row| Some(Value::from(row.candidate.clone())))
            .collect(),
    }];
    for key in spec.swept_keys() {
        let cells = rows
            .iter()
            .map(|row| row.settings.get(&key).filter(|v| !v.is_null()).cloned())
            .collect();
        columns.push(Column { name: key, cells });
    }
    columns.push(Column {
        name: "gpus".into(),
        cells: rows.iter().map(|row| row.gpus.map(Value::from)).collect(),
    });
    columns.push(Column {
        name: "feasible".into(),
        cells: rows
            .iter()
            .map(|row| {
                row.error
                    .is_empty()
                    .then(|| Value::Bool(feasible(row, &spec.sla)))
            })
            .collect(),
    });
    columns.push(Column {
        name: "error".into(),
        cells: rows
            .iter()
            .map(|row| Some(Value::from(row.error.clone())))
            .collect(),
    });
    for key in key_order(with_goodput) {
        let cells = rows
            .iter()
            .map(|row| row.report.get(key).filter(|v| !v.is_null()).cloned())
            .collect();
        columns.push(Column {
            name: key.to_owned(),
            cells,
        });
    }
    columns
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Boolean,
    Integer,
    Double,
    Text,
}

fn kind_of(cells: &[Option<Value>]) -> Kind {
    let values: Vec<&Value> = cells.iter().flatten().collect();
    if values.is_empty() {
        Kind::Text
    } else if values.iter().all(|value| value.is_boolean()) {
        Kind::Boolean
    } else if values.iter().all(|value| value.is_i64()) {
        Kind::Integer
    } else if values.iter().all(|value| value.is_number()) {
        Kind::Double
    } else {
        Kind::Text
    }
}

fn fail(err: parquet::errors::ParquetError) -> Error {
    Error::runtime(format!("cannot format results.parquet: {err}"))
}

/// The Parquet file of `columns` (all of equal length).
pub fn parquet_bytes(columns: &[Column]) -> Result<Vec<u8>> {
    let kinds: Vec<Kind> = columns
        .iter()
        .map(|column| kind_of(&column.cells))
        .collect();
    let fields = columns
        .iter()
        .zip(&kinds)
        .map(|(column, kind)| {
            let (physical, logical) = match kind {
                Kind::Boolean => (PhysicalType::BOOLEAN, None),
                Kind::Integer => (PhysicalType::INT64, None),
                Kind::Double => (PhysicalType::DOUBLE, None),
                Kind::Text => (PhysicalType::BYTE_ARRAY, Some(LogicalType::String)),
            };
            Type::primitive_type_builder(&column.name, physical)
                .with_repetition(Repetition::OPTIONAL)
                .with_logical_type(logical)
                .build()
                .map(Arc::new)
                .map_err(fail)
        })
        .collect::<Result<Vec<_>>>()?;
    let schema = Type::group_type_builder("sweep_results")
        .with_fields(fields)
        .build()
        .map_err(fail)?;
    let properties = Arc::new(
        WriterProperties::builder()
            .set_created_by(format!("dynosim {}", env!("CARGO_PKG_VERSION")))
            .build(),
    );
    let mut writer =
        SerializedFileWriter::new(Vec::new(), Arc::new(schema), properties).map_err(fail)?;
    let mut group = writer.next_row_group().map_err(fail)?;
    for (column, &kind) in columns.iter().zip(&kinds) {
        let mut chunk = group
            .next_column()
            .map_err(fail)?
            .ok_or_else(|| Error::runtime("results.parquet: fewer columns than its schema"))?;
        let levels: Vec<i16> = column
            .cells
            .iter()
            .map(|value| i16::from(value.is_some()))
            .collect();
        let present = column.cells.iter().flatten();
        match kind {
            Kind::Boolean => {
                let values: Vec<bool> = present.filter_map(Value::as_bool).collect();
                chunk
                    .typed::<BoolType>()
                    .write_batch(&values, Some(&levels), None)
            }
            Kind::Integer => {
                let values: Vec<i64> = present.filter_map(Value::as_i64).collect();
                chunk
                    .typed::<Int64Type>()
                    .write_batch(&values, Some(&levels), None)
            }
            Kind::Double => {
                let values: Vec<f64> = present.filter_map(Value::as_f64).collect();
                chunk
                    .typed::<DoubleType>()
                    .write_batch(&values, Some(&levels), None)
            }
            Kind::Text => {
                let values: Vec<ByteArray> = present
                    .map(|value| ByteArray::from(cell(Some(value)).into_bytes()))
                    .collect();
                chunk
                    .typed::<ByteArrayType>()
                    .write_batch(&values, Some(&levels), None)
            }
        }
        .map_err(fail)?;
        chunk.close().map_err(fail)?;
    }
    group.close().map_err(fail)?;
    writer.into_inner().map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    use serde_json::json;

    #[test]
    fn columns_take_the_type_of_their_values_and_nulls_stay_null() {
        let columns = vec![
            Column {
                name: "a.b".into(),
                cells: vec![Some(json!(1)), None, Some(json!(3))],
            },
            Column {
                name: "x".into(),
                cells: vec![Some(json!(1)), Some(json!(2.5)), None],
            },
            Column {
                name: "s".into(),
                cells: vec![Some(json!("kv")), Some(json!({"k": 1})), Some(json!(""))],
            },
            Column {
                name: "f".into(),
                cells: vec![Some(json!(true)), None, Some(json!(false))],
            },
            Column {
                name: "none".into(),
                cells: vec![None, None, None],
            },
        ];
        let file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut &file, &parquet_bytes(&columns).unwrap()).unwrap();
        let reader = SerializedFileReader::new(file).unwrap();
        let rows: Vec<Vec<(String, Field)>> = reader
            .get_row_iter(None)
            .unwrap()
            .map(|row| {
                row.unwrap()
                    .get_column_iter()
                    .map(|(name, field)| (name.clone(), field.clone()))
                    .collect()
            })
            .collect();
        assert_eq!(rows.len(), 3);
        let names: Vec<&str> = rows[0].iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["a.b", "x", "s", "f", "none"]);
        assert_eq!(rows[0][0].1, Field::Long(1));
        assert_eq!(rows[1][0].1, Field::Null);
        assert_eq!(rows[0][1].1, Field::Double(1.0));
        assert_eq!(rows[1][1].1, Field::Double(2.5));
        assert_eq!(rows[2][1].1, Field::Null);
        assert_eq!(rows[1][2].1, Field::Str(r#"{"k":1}"#.into()));
        assert_eq!(rows[2][2].1, Field::Str(String::new()));
        assert_eq!(rows[2][3].1, Field::Bool(false));
        assert_eq!(rows[1][4].1, Field::Null);
    }
}
