#ifndef C_TEST_PARALLELISM_H
#define C_TEST_PARALLELISM_H

/// How many tests the test process runs at once: the value of
/// SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH as the process started with it, or the
/// default this target sets when it was not set (0 if it could not be read).
int courier_tests_parallelization_width(void);

/// Whether the width is this target's default (the variable was not set by the caller).
int courier_tests_parallelization_width_is_default(void);

#endif
