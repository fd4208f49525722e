//! The `mooncake` JSONL trace reader.
