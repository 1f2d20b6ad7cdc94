import CTestParallelism
import Testing

/// The test process caps how many tests run at once (`Tests/CTestParallelism`): on two cores,
/// the whole suite started together made tests with time bounds miss them for the load alone.
@Suite("Test harness: how many tests run at once")
struct ParallelismTests {
    /// The cap is in the environment, as the constructor left it or as the caller set it.
    @Test
    func theCapIsSetBeforeTheTestLibraryReadsIt() {
        let width = courier_tests_parallelization_width()
        #expect(width > 0, "no cap: every test of the suite starts at once")
        if courier_tests_parallelization_width_is_default() != 0 {
            #expect(width == 16)
        }
    }
}
