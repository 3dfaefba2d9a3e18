//! The pipeline entries of issue 45: the compiler the build refuses, `doctor` and `--require`, the
//! GitHub Action run as GitHub runs it (`gha`, the harness; `action`), the checks people run on
//! actions (`lint`), the GitLab component under gitlab-ci-local (`gitlab`), and the container image
//! (`image`).

mod action;
mod doctor;
mod gha;
mod gitlab;
mod image;
mod lint;
mod toolchain;
mod tools;
