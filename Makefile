# Makefile - the build.
#
#   make              jobd, jobworker, jobctl into build/ (CPU only)
#   make CUDA=1       also kernels/cuda with nvcc (sm_80, sm_90 + PTX), linked with cuBLAS
#   make test         install deps, build with ASan+UBSan, run every suite; one summary line
#   make run          run the main job on the embedded default
#   make bench        benchmarks, printing ratios against a peer measured in the same run
#   make fuzz         libFuzzer targets for every parser of outside input (FUZZ_SECONDS each)
#   make crash        the crash simulator at every sync point and I/O error (scripts/crash)
#   make check        static checks: -Werror build, cppcheck, banned calls
#   make clean
#
# Two object trees: build/obj (optimised, the shipped binaries) and
# build/asan/obj (sanitised, for the tests). Header dependencies are tracked
# with -MMD; the flags of each tree are recorded in a stamp file, so changing
# CUDA=1 or CFLAGS rebuilds what it affects. Parallel-safe (make -j).

CC       ?= cc
ifeq ($(origin CC),default)
CC       := gcc
endif
CLANG    ?= clang
NVCC     ?= nvcc
CUDA     ?= 0
BUILD    ?= build
VERSION  := $(shell cat VERSION 2>/dev/null || echo 0.0.0)
GIT_REV  := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

PKGS     := libuv sqlite3 libpq libzstd jansson libcurl openssl libpcre2-8 zlib
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lhttp_parser
# What each binary's layers need: common/ (zstd, jansson, curl, OpenSSL) for
# all three; text/ adds PCRE2 (pre-tokenizer regexes); jobd adds SQLite,
# libpq, libuv, http-parser and zlib. jobctl links common/'s alone.
PKG_LIBS_COMMON := $(shell pkg-config --libs libzstd jansson libcurl openssl 2>/dev/null)
PKG_LIBS_TEXT   := $(shell pkg-config --libs libpcre2-8 2>/dev/null)

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wformat=2 -Wvla -Wno-unused-parameter
CSTD     := -std=c11 -D_GNU_SOURCE
DEFS     := -DPROJECT_VERSION='"$(VERSION)"'
INCS     := -I. $(PKG_CFLAGS)
CFLAGS_REL  := $(CSTD) $(WARN) $(DEFS) $(INCS) -O2 -g -pthread -MMD -MP
# SAN: the sanitizers of the test tree. `make SAN= BUILD=build/vg
# build/vg/asan/tests/unit` builds the tests without them, for Valgrind's
# memcheck (uninitialised reads, which ASan does not see).
SAN      ?= -fsanitize=address,undefined -fno-sanitize-recover=undefined
CFLAGS_ASAN := $(CSTD) $(WARN) $(DEFS) $(INCS) -O1 -g -pthread -MMD -MP \
               $(SAN) -fno-omit-frame-pointer
LDFLAGS_REL  := -g -pthread
LDFLAGS_ASAN := -g -pthread $(filter -fsanitize=%,$(SAN))
SYS_LIBS := -lm -pthread
LDLIBS   := $(PKG_LIBS) $(SYS_LIBS)

# ---- CUDA -------------------------------------------------------------------
CUDA_HOME ?= /usr/local/cuda
ifeq ($(CUDA),1)
  ifeq ($(shell command -v $(NVCC) 2>/dev/null || test -x $(CUDA_HOME)/bin/nvcc && echo y),)
    $(error CUDA=1 needs nvcc, which is not on PATH nor in $(CUDA_HOME)/bin: install the CUDA Toolkit, or build the CPU-only binaries with plain 'make')
  endif
  ifeq ($(shell command -v $(NVCC) 2>/dev/null),)
    NVCC := $(CUDA_HOME)/bin/nvcc
  endif
  CUDA_SRC   := $(wildcard kernels/cuda/*.cu)
  CUDA_ARCH  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
  # NVCC_EXTRA / CUDA_LIBS: for toolkits whose cuBLAS lives elsewhere (scripts/gpu-check)
  NVCCFLAGS  := -std=c++17 -O3 -I. $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror -MMD -MP $(NVCC_EXTRA)
  CFLAGS_REL += -DKN_HAVE_CUDA
  CUDA_LIBS  ?= -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart
  CUDA_LDLIBS := $(CUDA_LIBS) -lstdc++
  LDLIBS     += $(CUDA_LDLIBS)
endif

# ---- sources and layers ---------------------------------------------------------
# Every module of scripts/check-includes is one folder and one archive
# (build/obj/lib/libjobd_api.a for jobd/api). LAYERS lists them top-down:
# an archive may call only archives to its right (its ALLOWED list there), so
# one pass of the linker in this order resolves every right-way call. Each
# binary links only its own layers (jobctl: common alone), so a call into
# another binary's layers fails to link, and scripts/check-links refuses,
# before any binary links, an archive that calls a module it may not use.
LAYERS := jobd jobd/api jobd/intake jobd/work jobd/webhook jobd/tokens jobd/ui jobd/account \
          jobd/store jobd/blob jobd/http worker worker/run worker/engine kernels/cuda kernels/cpu \
          openai text common/gram common
ifneq ($(CUDA),1)
LAYERS := $(filter-out kernels/cuda,$(LAYERS))
endif
JOBD_LAYERS   := $(filter jobd jobd/% openai text common common/%,$(LAYERS))
WORKER_LAYERS := $(filter worker worker/% kernels/% openai text common common/%,$(LAYERS))
JOBCTL_LAYERS := common
BINS      := jobd jobworker jobctl
UNIT_SRC  := $(sort $(shell find tests/unit -name '*.c'))
INTEG_SRC := $(wildcard tests/integration/*.c)
CUDA_TEST_SRC := $(wildcard tests/cuda/*.c)
TH_SRC    := tests/th.c tests/th_proc.c tests/th_http.c
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)

# The GPU test and benchmark binaries link only what they need (kernels and
# the model code: jansson and pcre2 are their only libraries), so that a GPU
# machine without our -dev packages can build them (scripts/gpu-check).
GPU_LIB_SRC := common/err.c common/log.c common/buf.c common/clock.c common/js.c common/utf8.c \
               $(wildcard kernels/cpu/*.c) worker/engine/model.c worker/engine/forward.c \
               worker/engine/forward_cpu.c worker/engine/encoder.c \
               worker/engine/forward_cuda.c worker/engine/kv.c $(wildcard text/*.c) \
               common/gram/gram.c
GPU_LIB_OBJ := $(GPU_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CUDA_SRC:%.cu=$(BUILD)/obj/%.cu.o)

# Generated sources (build/gen/): schema.sql embedded as store_schema_sql[],
# schema_pg.sql (the PostgreSQL store) as store_schema_pg_sql[];
# the dashboard's static files (jobd/ui/assets/) as the table ui_assets[].
UI_ASSETS := $(sort $(wildcard jobd/ui/assets/*))
GEN_SRC   := $(BUILD)/gen/schema_sql.c $(BUILD)/gen/schema_pg_sql.c $(BUILD)/gen/ui_assets.c

# $(call layer_objs,TREE,LAYER): the objects of one layer's archive (generated
# sources belong to the layer that uses them).
layer_objs = $(patsubst %.c,$(1)/%.o,$(wildcard $(2)/*.c)) \
             $(if $(filter kernels/cuda,$(2)),$(patsubst %.cu,$(1)/%.cu.o,$(CUDA_SRC))) \
             $(if $(filter jobd/store,$(2)),$(1)/gen/schema_sql.o $(1)/gen/schema_pg_sql.o) \
             $(if $(filter jobd/ui,$(2)),$(1)/gen/ui_assets.o)
# $(call layer_libs,TREE,LAYERS): their archives, in link order.
layer_libs = $(foreach l,$(2),$(1)/lib/lib$(subst /,_,$(l)).a)
ASAN_LAYERS := $(filter-out kernels/cuda,$(LAYERS))
REL_LIBS  := $(call layer_libs,$(BUILD)/obj,$(LAYERS))
ASAN_LIBS := $(call layer_libs,$(BUILD)/asan/obj,$(ASAN_LAYERS))

REL_BINS  := $(BINS:%=$(BUILD)/%)
ASAN_BINS := $(BINS:%=$(BUILD)/asan/%)
TEST_BINS := $(BUILD)/asan/tests/unit $(if $(INTEG_SRC),$(BUILD)/asan/tests/integration)
ifeq ($(CUDA),1)
TEST_BINS += $(BUILD)/tests/cuda
endif

.PHONY: all test run bench fuzz check clean deps test-build crash
.DEFAULT_GOAL := all
.SECONDARY:

# V=1 shows full command lines
ifeq ($(V),1)
Q :=
else
Q := @
endif

all: $(REL_BINS) $(if $(filter 1,$(CUDA)),$(BUILD)/tests/cuda $(BUILD)/gpu_bench)

# ---- flag stamps: rebuild a tree when its flags change -----------------------
define flagstamp
$(1): FORCE
	@mkdir -p $$(dir $$@)
	@echo '$(2)' | cmp -s - $$@ || echo '$(2)' > $$@
endef
$(eval $(call flagstamp,$(BUILD)/obj/.flags,$(CC) $(CFLAGS_REL) $(NVCCFLAGS)))
$(eval $(call flagstamp,$(BUILD)/asan/obj/.flags,$(CC) $(CFLAGS_ASAN)))
.PHONY: FORCE
FORCE:
# The git revision reaches common/cli.c (--version) alone, through its own
# stamp: a commit rebuilds one file, not the whole tree.
$(eval $(call flagstamp,$(BUILD)/.rev,$(GIT_REV)))
$(BUILD)/obj/common/cli.o: CFLAGS_REL += -DPROJECT_REV='"$(GIT_REV)"'
$(BUILD)/asan/obj/common/cli.o: CFLAGS_ASAN += -DPROJECT_REV='"$(GIT_REV)"'
$(BUILD)/obj/common/cli.o $(BUILD)/asan/obj/common/cli.o: $(BUILD)/.rev

# ---- compile ------------------------------------------------------------------
$(BUILD)/obj/%.o: %.c $(BUILD)/obj/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC      $<')
	$(Q)$(CC) $(CFLAGS_REL) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(BUILD)/obj/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  NVCC    $<')
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/asan/obj/%.o: %.c $(BUILD)/asan/obj/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC asan $<')
	$(Q)$(CC) $(CFLAGS_ASAN) -c $< -o $@

$(BUILD)/gen/schema_sql.c: schema.sql scripts/embed-c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  GEN     $@')
	$(Q)python3 scripts/embed-c store_schema_sql $< > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/schema_pg_sql.c: schema_pg.sql scripts/embed-c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  GEN     $@')
	$(Q)python3 scripts/embed-c store_schema_pg_sql $< > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/ui_assets.c: $(UI_ASSETS) scripts/embed-c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  GEN     $@')
	$(Q)python3 scripts/embed-c --table ui_assets $(UI_ASSETS) > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c $(BUILD)/obj/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC      $<')
	$(Q)$(CC) $(CFLAGS_REL) -c $< -o $@

$(BUILD)/asan/obj/gen/%.o: $(BUILD)/gen/%.c $(BUILD)/asan/obj/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC asan $<')
	$(Q)$(CC) $(CFLAGS_ASAN) -c $< -o $@

# ---- archives -------------------------------------------------------------------
define archive_rule
$(1)/lib/lib$(subst /,_,$(2)).a: $(call layer_objs,$(1),$(2))
	@mkdir -p $$(dir $$@)
	@$$(if $$(Q),echo '  AR      $$@')
	$$(Q)rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach l,$(LAYERS),$(eval $(call archive_rule,$(BUILD)/obj,$(l))))
$(foreach l,$(ASAN_LAYERS),$(eval $(call archive_rule,$(BUILD)/asan/obj,$(l))))

# The layer check of the archives' symbols (scripts/check-links): every
# binary of a tree links after it, so a wrong-way call fails the build.
$(BUILD)/obj/lib/layers.ok: $(REL_LIBS) scripts/check-links scripts/check-includes
	$(Q)scripts/check-links $(REL_LIBS) && touch $@
$(BUILD)/asan/obj/lib/layers.ok: $(ASAN_LIBS) scripts/check-links scripts/check-includes
	$(Q)scripts/check-links $(ASAN_LIBS) && touch $@

# ---- link ---------------------------------------------------------------------
# $(call link,LDFLAGS,LIBS): objects first, then the archives in layer order.
link = $(CC) $(1) $(filter %.o,$^) $(filter %.a,$^) -o $@ $(2)
JOBD_LDLIBS   := $(PKG_LIBS) $(SYS_LIBS)
WORKER_LDLIBS := $(PKG_LIBS_TEXT) $(PKG_LIBS_COMMON) $(SYS_LIBS)
JOBCTL_LDLIBS := $(PKG_LIBS_COMMON) $(SYS_LIBS)

# jobctl is main.c plus its command files (cmd/jobctl/*.c).
JOBCTL_SRC := $(wildcard cmd/jobctl/*.c)

define binary_rules
$(BUILD)/$(1): $(patsubst %.c,$(BUILD)/obj/%.o,$(2)) $(call layer_libs,$(BUILD)/obj,$(3)) | $(BUILD)/obj/lib/layers.ok
	@$$(if $$(Q),echo '  LD      $$@')
	$$(Q)$$(call link,$$(LDFLAGS_REL),$$($(4)) $$($(5)))

$(BUILD)/asan/$(1): $(patsubst %.c,$(BUILD)/asan/obj/%.o,$(2)) $(call layer_libs,$(BUILD)/asan/obj,$(filter-out kernels/cuda,$(3))) | $(BUILD)/asan/obj/lib/layers.ok
	@$$(if $$(Q),echo '  LD      $$@')
	$$(Q)$$(call link,$$(LDFLAGS_ASAN),$$($(4)))
endef
# (the libraries go by variable name: CUDA_LIBS holds commas)
$(eval $(call binary_rules,jobd,cmd/jobd/main.c,$(JOBD_LAYERS),JOBD_LDLIBS))
$(eval $(call binary_rules,jobworker,cmd/jobworker/main.c,$(WORKER_LAYERS),WORKER_LDLIBS,CUDA_LDLIBS))
$(eval $(call binary_rules,jobctl,$(JOBCTL_SRC),$(JOBCTL_LAYERS),JOBCTL_LDLIBS))

# The test programs exercise every layer: they link every archive.
$(BUILD)/asan/tests/unit: $(UNIT_SRC:%.c=$(BUILD)/asan/obj/%.o) $(TH_SRC:%.c=$(BUILD)/asan/obj/%.o) $(ASAN_LIBS) | $(BUILD)/asan/obj/lib/layers.ok
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(call link,$(LDFLAGS_ASAN),$(PKG_LIBS) $(SYS_LIBS))

$(BUILD)/asan/tests/integration: $(INTEG_SRC:%.c=$(BUILD)/asan/obj/%.o) $(TH_SRC:%.c=$(BUILD)/asan/obj/%.o) $(ASAN_LIBS) | $(BUILD)/asan/obj/lib/layers.ok
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(call link,$(LDFLAGS_ASAN),$(PKG_LIBS) $(SYS_LIBS))

# GPU parity tests: optimised build (ASan and the CUDA runtime do not mix).
$(BUILD)/tests/cuda: $(CUDA_TEST_SRC:%.c=$(BUILD)/obj/%.o) $(TH_SRC:%.c=$(BUILD)/obj/%.o) $(GPU_LIB_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) $(LDFLAGS_REL) $^ -o $@ $(LDLIBS)

# GPU benchmark (synthetic Llama-3-8B shapes), CUDA=1 only.
$(BUILD)/gpu_bench: $(BUILD)/obj/tests/cuda/bench/gpu_bench.o $(GPU_LIB_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) $(LDFLAGS_REL) $^ -o $@ $(LDLIBS)

# The crash simulator's LD_PRELOAD shim (tests/crashsim/crashsim.c): no
# sanitizers (it is preloaded into the optimised build/jobd), -Werror.
$(BUILD)/crashsim.so: tests/crashsim/crashsim.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  CC      $@')
	$(Q)$(CC) $(CSTD) $(WARN) -O2 -g -fPIC -shared -pthread $< -o $@ -ldl

# Benchmark programs: optimised build.
BENCH_BINS := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(wildcard tests/bench/*.c))
$(BUILD)/bench/%: $(BUILD)/obj/tests/bench/%.o $(REL_LIBS) | $(BUILD)/obj/lib/layers.ok
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(call link,$(LDFLAGS_REL),$(LDLIBS))

# ---- top-level targets --------------------------------------------------------
deps:
	@scripts/install-deps

test-build: $(REL_BINS) $(ASAN_BINS) $(TEST_BINS) $(BUILD)/crashsim.so

# The build runs in a sub-make so that it happens after deps (pkg-config
# flags are computed when make starts).
test: deps
	@$(MAKE) --no-print-directory test-build
	@BUILD=$(BUILD) TESTS_ALL=1 tests/run $(TEST_BINS)

run: deps
	@$(MAKE) --no-print-directory all
	@scripts/run-default

bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_BINS)
	@scripts/bench

fuzz: deps
	@scripts/fuzz

crash: deps
	@$(MAKE) --no-print-directory $(BUILD)/jobd $(BUILD)/crashsim.so
	@BUILD=$(BUILD) scripts/crash

check: deps
	@$(MAKE) --no-print-directory all $(ASAN_BINS)
	@scripts/check

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
