//! Plans before they run: `validate`, `preview`, `intent`, and hostile input at the edges.

mod edges;
mod intent;
mod preview;
mod validate;
