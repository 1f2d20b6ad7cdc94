// Caps how many tests run at once, before the test library reads its configuration.
//
// With every test of the suite started together (about 750 on a 2-core machine), tests whose
// checks have a time bound (a deadline that must fire within seconds, a queue that must drain)
// missed it for the load alone. Swift Testing reads the cap from the environment when its entry
// point runs; a constructor runs before that, so a plain `swift test` gets the cap too. A value
// the caller set is kept.
#include "CTestParallelism.h"

#include <stdlib.h>

#define COURIER_TESTS_DEFAULT_WIDTH "16"

static int width_is_default = 0;

__attribute__((constructor)) static void courier_tests_cap_parallelization(void) {
    if (getenv("SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH") == NULL) {
        width_is_default = setenv("SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH", COURIER_TESTS_DEFAULT_WIDTH, 0) == 0;
    }
}

int courier_tests_parallelization_width(void) {
    const char *value = getenv("SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH");
    return value == NULL ? 0 : atoi(value);
}

int courier_tests_parallelization_width_is_default(void) { return width_is_default; }
