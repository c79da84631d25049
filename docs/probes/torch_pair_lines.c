// The cache lines one allocation and free through hipmem's PyTorch entry
// points touch, as cold as a framework's step leaves them: pairs of
// hipmem_torch_alloc / hipmem_torch_delete (each block freed eight
// allocations later), with 1 MiB of other memory written between calls.
// Run it under callgrind's cache model twice and take the difference per
// pair (docs/pool-measurements.md, stop 79):
//
//   gcc -O2 -o torch_pair_lines docs/probes/torch_pair_lines.c -ldl
//   export HIPMEM_TORCH_IDLE_RELEASE_MS=0 HIPMEM_HOST_ADDRESS_SPACE=68719476736
//   for n in 2000 4000; do valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file=pairs.$n ./torch_pair_lines libhipmem.so $n 1 0; done
//
// (On the CPU backend, as here, valgrind needs the smaller address space.)
//
// Arguments: the library, the pairs, 1 to write the other memory between
// calls (0 not to), 1 for 64 sizes from 64 KiB to 4 MiB (0: 1 MiB each).
// D1mr (first-level read misses) per pair is (pairs.4000 - pairs.2000) / 2000;
// the eviction loop only writes, so its misses are D1mw.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

typedef void *(*alloc_fn)(ssize_t, int, void *);
typedef void (*delete_fn)(void *);

static char *other;
static const size_t other_len = 1 << 20;

static void evict(void) {
  for (size_t i = 0; i < other_len; i += 64) other[i] = (char)i;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s LIBHIPMEM PAIRS [EVICT] [MIXED]\n", argv[0]);
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  alloc_fn alloc = (alloc_fn)dlsym(lib, "hipmem_torch_alloc");
  delete_fn del = (delete_fn)dlsym(lib, "hipmem_torch_delete");
  if (!alloc || !del) {
    fprintf(stderr, "not hipmem's library: %s\n", dlerror());
    return 1;
  }
  int pairs = atoi(argv[2]);
  int ev = argc > 3 ? atoi(argv[3]) : 1;
  int mixed = argc > 4 ? atoi(argv[4]) : 0;
  other = malloc(other_len);
  void *live[8] = {0};
  for (int i = 0; i < pairs; i++) {
    ssize_t size = mixed ? ((ssize_t)((i * 2654435761u) % 64) + 1) * 65536 : (1 << 20);
    void *p = alloc(size, 0, NULL);
    if (!p) {
      fprintf(stderr, "allocation %d of %zd bytes failed\n", i, size);
      return 1;
    }
    if (ev) evict();
    int k = i & 7;
    if (live[k]) {
      del(live[k]);
      if (ev) evict();
    }
    live[k] = p;
  }
  for (int k = 0; k < 8; k++)
    if (live[k]) del(live[k]);
  printf("%d pairs\n", pairs);
  return 0;
}
