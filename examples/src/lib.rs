//! Runnable CCattler programs, and the library behind the reference cluster binary `cca`.
//!
//! | item | what it is |
//! |---|---|
//! | [`cca`] | the `cca` command line: `dev`, `check`, `fmt`, `completions`, `server` (the HTTP API, [`cca::api`]) and its clients `apply`, `get`, `query`, `watch`, `status`, `nodes`, `token` |
//! | `src/bin/cca.rs` | the `cca` binary (`cargo run -p ccattler-examples --bin cca -- --help`) |
//! | `src/bin/api_figures.rs` | the API's figures: `GET /state` of 10,000 facts, 1,000 concurrent watchers |
//! | `src/bin/dev_converge.rs` | the figure: 100 instances over three local agents, apply to all running |
//! | `src/bin/toy.rs` | the smallest embedding: two controllers on a `MemoryStore` |
//! | `src/bin/mirror.rs` | the README's custom controller |
//! | `hello.cca` | the example cluster `cca dev` runs first |

#![deny(missing_docs)]

pub mod cca;
