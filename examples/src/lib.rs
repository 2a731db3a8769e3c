//! Reference programs live in `src/bin`.
