//! The pipeline entries of issue 45: the compiler the build refuses, `doctor` and `--require`, the
//! GitHub Action run as GitHub runs it, the GitLab component under gitlab-ci-local, and the
//! container image.

mod doctor;
mod toolchain;
