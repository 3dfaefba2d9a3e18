//! The project as a whole: docs that run, a newcomer's first hour, the module layering, the library
//! API, named skips, the schema property test and the real-project plans.

mod dependencies;
mod docs;
mod first_hour;
mod imports;
mod library;
mod mutation;
mod real_projects;
mod schema_property;
mod skips;
