#ifndef COURIER_CLIBFUZZER_H
#define COURIER_CLIBFUZZER_H
#include <stddef.h>
#include <stdint.h>

/// libFuzzer's entry for programs with their own main (defined only when linked with
/// -sanitize=fuzzer; CourierFuzz calls it only when built with COURIER_FUZZING).
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
