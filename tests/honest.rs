//! The suite cannot pass by skipping: a test whose real component is
//! missing fails, naming what is missing and the command that installs it
//! (see `common::missing`).

use crate::common;

#[test]
#[should_panic(expected = "Install it with `apt-get install frobnicator` (.ci/run does)")]
fn a_missing_component_fails_the_test_naming_its_install_command() {
    common::missing::missing(
        "frobnicator",
        "this test needs frobnicator",
        "apt-get install frobnicator",
    );
}
