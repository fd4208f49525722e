//! Round robin over workers, with a rank cursor per worker.
