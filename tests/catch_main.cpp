// The one translation unit that compiles Catch2's runner (slow to build, so built once).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

int main(int argc, char* argv[]) {
  // Compiled kernels are cached under the build tree, not in the user's ~/.cache (fusec
  // processes the tests start inherit it). A FUSE_CACHE_DIR already set wins.
  setenv("FUSE_CACHE_DIR", FUSE_BINARY_DIR "/tests/fuse-cache", /*overwrite=*/0);
  return Catch::Session().run(argc, argv);
}
