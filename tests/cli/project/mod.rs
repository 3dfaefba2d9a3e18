//! The project as a whole: docs that run, a newcomer's first hour, the module layering, the library
//! API, named skips, who writes to the streams (`streams`), the schema property test, the
//! real-project plans and what reading the code should not trip over (`tidy`).

mod dependencies;
mod docs;
mod first_hour;
mod imports;
mod lengths;
mod library;
mod mutation;
mod processes;
mod real_projects;
mod schema_property;
mod skips;
mod streams;
mod tidy;
