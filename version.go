package ringlimit

// Version is the release of this module, as its tag names it without the
// leading "v". Binaries report it (-version) and the image labels carry it.
// A release changes it in the same commit that CHANGELOG.md names the
// release in (RELEASING.md).
const Version = "0.1.0"
