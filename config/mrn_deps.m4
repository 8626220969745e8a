# Dependency checks. Each optional part gets MRN_WITH_<part>=yes|no and a
# reason shown in the summary at the end of configure.

# MRN_CHECK_OMPI: Open MPI devel headers. Found from mpicc --showme, then
# pkg-config ompi; --with-ompi=DIR names the directory holding opal/ and
# ompi_config.h-era headers (…/include/openmpi).
AC_DEFUN([MRN_CHECK_OMPI], [
  AC_ARG_WITH([ompi],
    [AS_HELP_STRING([--with-ompi=DIR], [Open MPI's internal headers (the dir with opal_config.h); default: from mpicc --showme or pkg-config ompi])],
    [], [with_ompi=check])
  mrn_ompi_inc=
  mrn_ompi_why=
  # mpicc also builds the UCX tests' MPI programs (MRN_HAVE_MPICC).
  AS_IF([test "x$with_ompi" != xno], [AC_PATH_PROG([MPICC], [mpicc])])
  AS_CASE([$with_ompi],
    [no], [mrn_ompi_why="disabled by --without-ompi"],
    [check|yes], [
      AS_IF([test -n "$MPICC"], [
        for d in `$MPICC --showme:incdirs 2>/dev/null`; do
          AS_IF([test -r "$d/opal_config.h"], [mrn_ompi_inc=$d])
          AS_IF([test -z "$mrn_ompi_inc" && test -r "$d/openmpi/opal_config.h"], [mrn_ompi_inc=$d/openmpi])
        done])
      AS_IF([test -z "$mrn_ompi_inc" && test -n "$PKG_CONFIG"], [
        for f in `$PKG_CONFIG --cflags-only-I ompi 2>/dev/null`; do
          d=${f#-I}
          AS_IF([test -r "$d/opal_config.h"], [mrn_ompi_inc=$d])
          AS_IF([test -z "$mrn_ompi_inc" && test -r "$d/openmpi/opal_config.h"], [mrn_ompi_inc=$d/openmpi])
        done])
      AS_IF([test -z "$mrn_ompi_inc"], [mrn_ompi_why="Open MPI devel headers not found (install libopenmpi-dev or pass --with-ompi=DIR)"])],
    [AS_IF([test -r "$with_ompi/opal_config.h"], [mrn_ompi_inc=$with_ompi],
       [AC_MSG_ERROR([--with-ompi=$with_ompi: no opal_config.h there])])])
  # Open MPI 5's and 6's opal_config.h name the headers of their built-in threads
  # and timer components (MCA_*_HEADER), but make install does not install
  # them (upstream v5.0.7 lists them as noinst sources; Debian 13's
  # libopenmpi-dev lacks opal/mca/threads/pthreads/*.h and
  # opal/mca/timer/linux/timer_linux.h). They come from the matching
  # source tree, searched after the installed headers:
  # --with-ompi-source=DIR (tests/harness/stacks.sh fetches Debian's for 6.12).
  AC_ARG_WITH([ompi-source],
    [AS_HELP_STRING([--with-ompi-source=DIR], [the source tree of the same Open MPI release, for the internal headers its devel package lacks (Open MPI 5: opal/mca/threads/pthreads/*.h, opal/mca/timer/linux/*.h)])],
    [], [with_ompi_source=])
  mrn_ompi_src_cppflags=
  mrn_ompi_missing=
  AS_IF([test -n "$mrn_ompi_inc"], [
    for h in `sed -n 's/^#define MCA_@<:@A-Za-z0-9_@:>@*HEADER "\(.*\.h\)"$/\1/p' "$mrn_ompi_inc/opal_config.h"`; do
      AS_IF([test -r "$mrn_ompi_inc/$h"], [],
        [test -n "$with_ompi_source" && test -r "$with_ompi_source/$h"], [],
        [mrn_ompi_missing="$mrn_ompi_missing $h"])
    done
    AS_IF([test -n "$with_ompi_source" && test "x$with_ompi_source" != xno],
      [mrn_ompi_src_cppflags="-I$with_ompi_source"])])
  AC_MSG_CHECKING([for Open MPI internal headers])
  AS_IF([test -n "$mrn_ompi_inc"], [
    OMPI_CPPFLAGS="-I$mrn_ompi_inc $mrn_ompi_src_cppflags"
    # Open MPI 5 includes pmix.h from an external PMIx (Debian: libpmix-dev,
    # outside the default include path).
    AS_IF([test -r "$mrn_ompi_inc/opal/mca/pmix/pmix-internal.h" && test -n "$PKG_CONFIG"],
      [OMPI_CPPFLAGS="$OMPI_CPPFLAGS `$PKG_CONFIG --cflags-only-I pmix 2>/dev/null`"])
    mrn_ompi_ver=`sed -n 's/^#define OPAL_VERSION "\(.*\)"/\1/p' "$mrn_ompi_inc/opal/version.h" 2>/dev/null`
    # What the component includes must compile: a header opal_config.h
    # names may be missing without harm (4.1's timer header), or not (5's
    # and 6's thread headers).
    mrn_save_CPPFLAGS=$CPPFLAGS
    CPPFLAGS="$CPPFLAGS $OMPI_CPPFLAGS"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include "opal_config.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/util/proc.h"]], [[]])], [mrn_ompi_compiles=yes], [mrn_ompi_compiles=no])
    CPPFLAGS=$mrn_save_CPPFLAGS
    AS_IF([test "x$mrn_ompi_compiles" != xyes], [
      mrn_ompi_why="Open MPI $mrn_ompi_ver's devel headers at $mrn_ompi_inc do not compile${mrn_ompi_missing:+: they lack$mrn_ompi_missing (pass --with-ompi-source=DIR: the same release's source tree)}"
      mrn_ompi_inc=
      OMPI_CPPFLAGS=])])
  AS_IF([test -n "$mrn_ompi_inc"], [
    MRN_WITH_OMPI=yes
    AC_MSG_RESULT([$mrn_ompi_inc (Open MPI $mrn_ompi_ver)])
    mrn_ompi_why="Open MPI $mrn_ompi_ver at $mrn_ompi_inc"
  ], [
    MRN_WITH_OMPI=no
    AC_MSG_RESULT([no: $mrn_ompi_why])
    AS_IF([test "x$with_ompi" = xyes], [AC_MSG_ERROR([$mrn_ompi_why])])
  ])
  AC_SUBST([OMPI_CPPFLAGS])
  AM_CONDITIONAL([MRN_WITH_OMPI], [test "x$MRN_WITH_OMPI" = xyes])
  # MPI programs of the UCX tests need only mpicc, not Open MPI's internal
  # headers (Debian forky's Open MPI 6 lacks some, and its source is not
  # served): mpirun --mca pml ucx runs there without the component.
  AM_CONDITIONAL([MRN_HAVE_MPICC], [test "x$with_ompi" != xno && test -n "$MPICC"])

  # Where libopen-pal lives, and where Open MPI looks for components.
  OMPI_LIBDIR=
  AS_IF([test "x$MRN_WITH_OMPI" = xyes && test -n "$MPICC"],
    [OMPI_LIBDIR=`$MPICC --showme:libdirs 2>/dev/null | awk '{print $[1]}'`])
  AC_SUBST([OMPI_LIBDIR])
  # make install stays under --prefix unless told otherwise: by default the
  # component goes to <pkglibdir>/components, next to grdma-shadow;
  # --with-ompi-component-dir=ompi means Open MPI's own directory.
  AC_ARG_WITH([ompi-component-dir],
    [AS_HELP_STRING([--with-ompi-component-dir=DIR], [where make install puts mca_rcache_mrnotify.so (default: PKGLIBDIR/components, under the prefix; "ompi": Open MPI's own component directory, from ompi_info --path pkglibdir, where Open MPI finds it without mca_base_component_path)])],
    [ompicomponentdir=$with_ompi_component_dir],
    [ompicomponentdir='${pkglibdir}/components'])
  AS_IF([test "x$ompicomponentdir" = xompi], [
    ompicomponentdir=`ompi_info --path pkglibdir 2>/dev/null | sed -n 's/^ *Pkglibdir: *//p'`
    AS_IF([test -z "$ompicomponentdir"], [AC_MSG_ERROR([--with-ompi-component-dir=ompi: ompi_info --path pkglibdir gave nothing])])])
  AC_SUBST([ompicomponentdir])
  # The component's MPI test programs (tests/mca).
  MPI_CFLAGS=
  MPI_LIBS=
  AS_IF([test "x$MRN_WITH_OMPI" = xyes && test -n "$MPICC"],
    [MPI_CFLAGS=`$MPICC --showme:compile 2>/dev/null`
     MPI_LIBS=`$MPICC --showme:link 2>/dev/null`])
  AC_SUBST([MPI_CFLAGS])
  AC_SUBST([MPI_LIBS])
])

# MRN_CHECK_PKG(VAR, module [>= version], what to install)
# Skipped when mrn_why_VAR is already set (the part was switched off).
AC_DEFUN([MRN_CHECK_PKG], [
  AS_IF([test -n "$mrn_why_$1"], [MRN_HAVE_$1=no], [
  PKG_CHECK_MODULES([$1], [$2], [MRN_HAVE_$1=yes
    mrn_why_$1="`$PKG_CONFIG --modversion m4_bpatsubst([$2], [ .*]) | head -n 1`"],
    [MRN_HAVE_$1=no
    mrn_why_$1="$2 not found (install $3)"])])
  AM_CONDITIONAL([MRN_HAVE_$1], [test "x$MRN_HAVE_$1" = xyes])
])

# MRN_CHECK_KERNEL: the kernel build tree for the module and, for the guest
# tests, the bootable image of the same release.
AC_DEFUN([MRN_CHECK_KERNEL], [
  AC_ARG_WITH([kernel-build],
    [AS_HELP_STRING([--with-kernel-build=DIR], [kernel build tree for mrnotify.ko (default: /lib/modules/`uname -r`/build, else the newest /lib/modules/*/build); --without-kernel-build skips the module])],
    [], [with_kernel_build=check])
  AC_ARG_WITH([kernel-image],
    [AS_HELP_STRING([--with-kernel-image=FILE], [kernel image the guest tests boot (default: /boot/vmlinuz-<release of the build tree>)])],
    [], [with_kernel_image=check])
  KERNEL_BUILD=
  KERNEL_RELEASE=
  mrn_kmod_why=
  AS_CASE([$with_kernel_build],
    [no], [mrn_kmod_why="disabled by --without-kernel-build"],
    [check|yes], [
      AS_IF([test -d "/lib/modules/`uname -r`/build"], [KERNEL_BUILD=/lib/modules/`uname -r`/build],
        [KERNEL_BUILD=`ls -d /lib/modules/*/build 2>/dev/null | sort -V | tail -n 1`])
      AS_IF([test -z "$KERNEL_BUILD"], [mrn_kmod_why="no kernel build tree (install linux-headers-amd64 or pass --with-kernel-build=DIR)"])],
    [KERNEL_BUILD=$with_kernel_build])
  AC_MSG_CHECKING([for a kernel build tree])
  AS_IF([test -n "$KERNEL_BUILD"], [
    KERNEL_RELEASE=`sed -n 's/^#define UTS_RELEASE "\(.*\)"/\1/p' "$KERNEL_BUILD/include/generated/utsrelease.h" 2>/dev/null`
    AS_IF([test -z "$KERNEL_RELEASE"], [
      AC_MSG_RESULT([no])
      AC_MSG_ERROR([$KERNEL_BUILD is not a configured kernel build tree (no include/generated/utsrelease.h)])])
    AS_IF([grep -q '^CONFIG_MMU_NOTIFIER=y' "$KERNEL_BUILD/.config" 2>/dev/null || grep -q 'define CONFIG_MMU_NOTIFIER 1' "$KERNEL_BUILD/include/generated/autoconf.h" 2>/dev/null], [],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([the kernel in $KERNEL_BUILD lacks CONFIG_MMU_NOTIFIER, which mrnotify.ko needs])])
    AC_MSG_RESULT([$KERNEL_BUILD ($KERNEL_RELEASE)])
    MRN_WITH_KMOD=yes
    mrn_kmod_why="against $KERNEL_RELEASE ($KERNEL_BUILD)"
  ], [
    AC_MSG_RESULT([no])
    MRN_WITH_KMOD=no
    AS_IF([test "x$with_kernel_build" = xyes], [AC_MSG_ERROR([$mrn_kmod_why])])
  ])
  AC_ARG_WITH([kmoddir],
    [AS_HELP_STRING([--with-kmoddir=DIR], [where make install puts mrnotify.ko (default: /lib/modules/<release>/updates)])],
    [kmoddir=$with_kmoddir], [kmoddir="/lib/modules/$KERNEL_RELEASE/updates"])
  AC_SUBST([kmoddir])
  AC_SUBST([KERNEL_BUILD])
  AC_SUBST([KERNEL_RELEASE])
  AM_CONDITIONAL([MRN_WITH_KMOD], [test "x$MRN_WITH_KMOD" = xyes])

  # Guest tests: qemu, the matching image, a static busybox, cpio.
  AC_PATH_PROG([QEMU], [qemu-system-x86_64])
  AC_PATH_PROG([CPIO], [cpio])
  AC_MSG_CHECKING([for a static busybox])
  BUSYBOX=
  for b in /bin/busybox /usr/bin/busybox; do
    AS_IF([test -x "$b" && ! ldd "$b" >/dev/null 2>&1], [BUSYBOX=$b; break])
  done
  AS_IF([test -n "$BUSYBOX"], [AC_MSG_RESULT([$BUSYBOX])], [AC_MSG_RESULT([no])])
  KERNEL_IMAGE=
  AS_CASE([$with_kernel_image],
    [no], [],
    [check|yes], [AS_IF([test -n "$KERNEL_RELEASE" && test -r "/boot/vmlinuz-$KERNEL_RELEASE"], [KERNEL_IMAGE=/boot/vmlinuz-$KERNEL_RELEASE])],
    [KERNEL_IMAGE=$with_kernel_image])
  AC_MSG_CHECKING([for a bootable kernel image for the guest tests])
  AS_IF([test -n "$KERNEL_IMAGE"], [AC_MSG_RESULT([$KERNEL_IMAGE])], [AC_MSG_RESULT([no])])
  mrn_guest_missing=
  AS_IF([test "x$MRN_WITH_KMOD" != xyes], [mrn_guest_missing="$mrn_guest_missing linux-headers-amd64"])
  AS_IF([test -z "$KERNEL_IMAGE"], [mrn_guest_missing="$mrn_guest_missing linux-image-amd64"])
  AS_IF([test -z "$QEMU"], [mrn_guest_missing="$mrn_guest_missing qemu-system-x86"])
  AS_IF([test -z "$BUSYBOX"], [mrn_guest_missing="$mrn_guest_missing busybox-static"])
  AS_IF([test -z "$CPIO"], [mrn_guest_missing="$mrn_guest_missing cpio"])
  AC_SUBST([KERNEL_IMAGE])
])
