# MRN_CXX17: make the C++ compiler use C++17 (or fail).
AC_DEFUN([MRN_CXX17], [
  AC_LANG_PUSH([C++])
  mrn_save_CXXFLAGS=$CXXFLAGS
  AC_CACHE_CHECK([whether $CXX accepts -std=c++17], [mrn_cv_cxx17], [
    CXXFLAGS="$CXXFLAGS -std=c++17"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <optional>
#include <string_view>]], [[std::optional<std::string_view> s{"x"}; if constexpr (sizeof(int) > 1) return s->size() == 1 ? 0 : 1;]])],
      [mrn_cv_cxx17=yes], [mrn_cv_cxx17=no])])
  CXXFLAGS=$mrn_save_CXXFLAGS
  AS_IF([test "x$mrn_cv_cxx17" != xyes], [AC_MSG_ERROR([a C++17 compiler is required (install g++)])])
  AC_SUBST([MRN_CXXSTD], [-std=c++17])
  AC_LANG_POP([C++])
])

# MRN_WARNINGS: -Wall -Wextra always; -Werror with --enable-werror (CI).
AC_DEFUN([MRN_WARNINGS], [
  AC_ARG_ENABLE([werror],
    [AS_HELP_STRING([--enable-werror], [treat compiler warnings as errors (CI does)])],
    [], [enable_werror=no])
  MRN_WARN_CFLAGS="-Wall -Wextra"
  AS_IF([test "x$enable_werror" = xyes], [MRN_WARN_CFLAGS="$MRN_WARN_CFLAGS -Werror"])
  AC_SUBST([MRN_WARN_CFLAGS])
])

# MRN_DEBUG_AND_SANITIZERS: --enable-debug turns on the library's invariant
# checks (MRN_ASSERT); --enable-sanitizer=thread|address builds the user-space
# code with ThreadSanitizer, or AddressSanitizer with UndefinedBehaviorSanitizer
# (CI runs the unit tests under both; the kernel module is not affected).
AC_DEFUN([MRN_DEBUG_AND_SANITIZERS], [
  AC_ARG_ENABLE([debug],
    [AS_HELP_STRING([--enable-debug], [check the cache's invariants at run time (slower)])],
    [], [enable_debug=no])
  AS_IF([test "x$enable_debug" = xyes],
    [AC_DEFINE([MRN_DEBUG], [1], [Check invariants at run time])])
  AC_ARG_ENABLE([sanitizer],
    [AS_HELP_STRING([--enable-sanitizer=KIND], [build with a sanitizer: thread, or address (with undefined)])],
    [], [enable_sanitizer=no])
  MRN_SAN_FLAGS=
  AS_CASE([$enable_sanitizer],
    [no], [],
    [thread], [MRN_SAN_FLAGS="-fsanitize=thread -g -O1"],
    [address], [MRN_SAN_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"],
    [AC_MSG_ERROR([--enable-sanitizer takes thread or address, not "$enable_sanitizer"])])
  CFLAGS="$CFLAGS $MRN_SAN_FLAGS"
  CXXFLAGS="$CXXFLAGS $MRN_SAN_FLAGS"
  LDFLAGS="$LDFLAGS $MRN_SAN_FLAGS"
])
