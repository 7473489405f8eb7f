# Makefile - the build.
#
#   make              jobd, jobworker, jobctl into build/ (CPU only)
#   make CUDA=1       also kernels/cuda with nvcc (sm_80, sm_90 + PTX), linked with cuBLAS
#   make test         install deps, build with ASan+UBSan, run every suite; one summary line
#   make run          run the main job on the embedded default
#   make bench        benchmarks, printing ratios against a peer measured in the same run
#   make fuzz         libFuzzer targets for every parser of outside input (FUZZ_SECONDS each)
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

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wformat=2 -Wvla -Wno-unused-parameter
CSTD     := -std=c11 -D_GNU_SOURCE
DEFS     := -DPROJECT_VERSION='"$(VERSION)"' -DPROJECT_REV='"$(GIT_REV)"'
INCS     := -I. $(PKG_CFLAGS)
CFLAGS_REL  := $(CSTD) $(WARN) $(DEFS) $(INCS) -O2 -g -pthread -MMD -MP
CFLAGS_ASAN := $(CSTD) $(WARN) $(DEFS) $(INCS) -O1 -g -pthread -MMD -MP \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined \
               -fno-omit-frame-pointer
LDFLAGS_REL  := -g -pthread
LDFLAGS_ASAN := -g -pthread -fsanitize=address,undefined
LDLIBS   := $(PKG_LIBS) -lm -pthread

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
  LDLIBS     += $(CUDA_LIBS) -lstdc++
endif

# ---- sources ------------------------------------------------------------------
# Every .c under the library folders (jobd/ and worker/ have one sub-folder
# per layer: see the README's layout table).
LIB_SRC   := $(sort $(shell find common text openai jobd worker kernels/cpu -name '*.c'))
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
               worker/engine/forward_cpu.c \
               worker/engine/forward_cuda.c worker/engine/kv.c text/gguf.c \
               text/tok_gguf.c text/tok.c text/tok_unicode.c text/chat.c text/jinja.c \
               common/gram/gram.c
GPU_LIB_OBJ := $(GPU_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CUDA_SRC:%.cu=$(BUILD)/obj/%.cu.o)

# Generated sources (build/gen/): schema.sql embedded as store_schema_sql[],
# schema_pg.sql (the PostgreSQL store) as store_schema_pg_sql[];
# the dashboard's static files (jobd/ui/assets/) as the table ui_assets[].
UI_ASSETS := $(sort $(wildcard jobd/ui/assets/*))
GEN_SRC   := $(BUILD)/gen/schema_sql.c $(BUILD)/gen/schema_pg_sql.c $(BUILD)/gen/ui_assets.c

REL_LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CUDA_SRC:%.cu=$(BUILD)/obj/%.cu.o) \
                $(GEN_SRC:$(BUILD)/gen/%.c=$(BUILD)/obj/gen/%.o)
ASAN_LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/asan/obj/%.o) $(GEN_SRC:$(BUILD)/gen/%.c=$(BUILD)/asan/obj/gen/%.o)

REL_BINS  := $(BINS:%=$(BUILD)/%)
ASAN_BINS := $(BINS:%=$(BUILD)/asan/%)
TEST_BINS := $(BUILD)/asan/tests/unit $(if $(INTEG_SRC),$(BUILD)/asan/tests/integration)
ifeq ($(CUDA),1)
TEST_BINS += $(BUILD)/tests/cuda
endif

.PHONY: all test run bench fuzz check clean deps test-build
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

# ---- link ---------------------------------------------------------------------
$(BUILD)/%: $(BUILD)/obj/cmd/%/main.o $(REL_LIB_OBJ)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) $(LDFLAGS_REL) $^ -o $@ $(LDLIBS)

$(BUILD)/asan/%: $(BUILD)/asan/obj/cmd/%/main.o $(ASAN_LIB_OBJ)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) $(LDFLAGS_ASAN) $^ -o $@ $(LDLIBS)

# jobctl is main.c plus its command files (cmd/jobctl/*.c): extra prerequisites
# of the pattern rules above, which link all of $^.
JOBCTL_SRC := $(filter-out cmd/jobctl/main.c,$(wildcard cmd/jobctl/*.c))
$(BUILD)/jobctl: $(JOBCTL_SRC:%.c=$(BUILD)/obj/%.o)
$(BUILD)/asan/jobctl: $(JOBCTL_SRC:%.c=$(BUILD)/asan/obj/%.o)

$(BUILD)/asan/tests/unit: $(UNIT_SRC:%.c=$(BUILD)/asan/obj/%.o) $(TH_SRC:%.c=$(BUILD)/asan/obj/%.o) $(ASAN_LIB_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) $(LDFLAGS_ASAN) $^ -o $@ $(LDLIBS)

$(BUILD)/asan/tests/integration: $(INTEG_SRC:%.c=$(BUILD)/asan/obj/%.o) $(TH_SRC:%.c=$(BUILD)/asan/obj/%.o) $(ASAN_LIB_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) $(LDFLAGS_ASAN) $^ -o $@ $(LDLIBS)

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

# Benchmark programs: optimised build.
BENCH_BINS := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(wildcard tests/bench/*.c))
$(BUILD)/bench/%: $(BUILD)/obj/tests/bench/%.o $(REL_LIB_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo '  LD      $@')
	$(Q)$(CC) $(LDFLAGS_REL) $^ -o $@ $(LDLIBS)

# ---- top-level targets --------------------------------------------------------
deps:
	@scripts/install-deps

test-build: $(REL_BINS) $(ASAN_BINS) $(TEST_BINS)

# The build runs in a sub-make so that it happens after deps (pkg-config
# flags are computed when make starts).
test: deps
	@$(MAKE) --no-print-directory test-build
	@BUILD=$(BUILD) tests/run $(TEST_BINS)

run: deps
	@$(MAKE) --no-print-directory all
	@scripts/run-default

bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_BINS)
	@scripts/bench

fuzz: deps
	@scripts/fuzz

check: deps
	@$(MAKE) --no-print-directory all $(ASAN_BINS)
	@scripts/check

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
