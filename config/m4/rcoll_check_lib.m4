# RCOLL_CHECK_LIB(name, header, lib, function, [guess-dir])
# The shared body of every optional-dependency check: handles
# --with-NAME=DIR|yes|no (default: use if found), saves and restores flags,
# AC_SUBSTs NAME_CPPFLAGS/NAME_LDFLAGS/NAME_LIBS, defines HAVE_NAME and
# AM_CONDITIONAL HAVE_NAME. Errors if asked for and missing; warns if guessed.
# librcoll does not link NAME_LIBS: it loads the library at run time
# (src/util/dl.c), first from NAME_LIBDIR when a directory was given.
AC_DEFUN([RCOLL_CHECK_LIB], [
  m4_pushdef([UP], m4_toupper([$1]))
  AC_ARG_WITH([$1],
    [AS_HELP_STRING([--with-$1=DIR|yes|no], [use $1 (default: if found)])],
    [], [with_$1=guess])
  rcoll_have_$1=no
  rcoll_$1_dir=
  UP[]_CPPFLAGS=
  UP[]_LDFLAGS=
  UP[]_LIBS=
  AS_CASE(["x$with_$1"],
    [xno], [],
    [xyes|xguess|x], [rcoll_$1_dir="$5"],
    [rcoll_$1_dir="$with_$1"])
  AS_IF([test "x$with_$1" != "xno"], [
    AS_IF([test -n "$rcoll_$1_dir"], [
      UP[]_CPPFLAGS="-I$rcoll_$1_dir/include"
      AS_IF([test -d "$rcoll_$1_dir/lib64"],
            [UP[]_LDFLAGS="-L$rcoll_$1_dir/lib64 -Wl,-rpath,$rcoll_$1_dir/lib64"],
            [UP[]_LDFLAGS="-L$rcoll_$1_dir/lib -Wl,-rpath,$rcoll_$1_dir/lib"])
    ])
    rcoll_save_CPPFLAGS="$CPPFLAGS"; rcoll_save_LDFLAGS="$LDFLAGS"; rcoll_save_LIBS="$LIBS"
    CPPFLAGS="$CPPFLAGS $UP[]_CPPFLAGS"; LDFLAGS="$LDFLAGS $UP[]_LDFLAGS"
    AC_CHECK_HEADER([$2], [
      AC_CHECK_LIB([$3], [$4], [rcoll_have_$1=yes; UP[]_LIBS="-l$3"])
    ])
    CPPFLAGS="$rcoll_save_CPPFLAGS"; LDFLAGS="$rcoll_save_LDFLAGS"; LIBS="$rcoll_save_LIBS"
    AS_IF([test "x$rcoll_have_$1" = "xno"], [
      AS_IF([test "x$with_$1" != "xguess"],
            [AC_MSG_ERROR([--with-$1 was given but $2 / -l$3 was not found])],
            [AC_MSG_WARN([$1 not found; building without it])])
      UP[]_CPPFLAGS=; UP[]_LDFLAGS=
    ])
  ])
  AS_IF([test "x$rcoll_have_$1" = "xyes"],
        [AC_DEFINE([HAVE_]UP, [1], [Define to 1 if $1 is used])
         AS_IF([test -n "$rcoll_$1_dir"],
               [AS_IF([test -d "$rcoll_$1_dir/lib64"],
                      [rcoll_$1_libdir="$rcoll_$1_dir/lib64"],
                      [rcoll_$1_libdir="$rcoll_$1_dir/lib"])
                AC_DEFINE_UNQUOTED(UP[_LIBDIR], ["$rcoll_$1_libdir"],
                  [Where librcoll tries to dlopen $1 first])])])
  AC_SUBST(UP[_CPPFLAGS])
  AC_SUBST(UP[_LDFLAGS])
  AC_SUBST(UP[_LIBS])
  AM_CONDITIONAL([HAVE_]UP, [test "x$rcoll_have_$1" = "xyes"])
  m4_popdef([UP])
])
