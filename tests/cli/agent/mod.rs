//! Agent steps against a scripted model: the agent loop, the planner and reviewer stages, stuck
//! detection, replay, skills and TLS to the model's endpoint.

mod budgets;
mod replay;
mod skills;
mod stages;
mod steps;
mod stuck;
mod tls;
