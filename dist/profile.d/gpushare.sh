# shellcheck shell=sh
# gpushare: opt-in preload of the gpushare hook (/etc/profile.d/gpushare.sh).
#
# Login shells of users who opted in get LD_PRELOAD of libgpushare.so, so
# that their CUDA programs are scheduled by gpushared (see libgpushare(7)).
# Nothing happens unless one of these is true:
#   - the user created ~/.config/gpushare/auto (or $XDG_CONFIG_HOME/gpushare/auto);
#   - the administrator set GPUSHARE_AUTO=1 in /etc/default/gpushare,
#     and the user has no ~/.config/gpushare/noauto.
# GPUSHARE_AUTO=0 in the environment disables it for one login.
# The library is preloaded only if it is installed, and only once.
#
# This file is sourced by every POSIX login shell: it must never fail, print,
# or leave variables behind.

_gpushare_want=
if [ "${GPUSHARE_AUTO-}" != 0 ]; then
    _gpushare_conf="${XDG_CONFIG_HOME:-${HOME:-/nonexistent}/.config}/gpushare"
    if [ -e "$_gpushare_conf/auto" ]; then
        _gpushare_want=1
    elif [ ! -e "$_gpushare_conf/noauto" ] && [ -r /etc/default/gpushare ]; then
        # Read the setting in a subshell: a broken defaults file cannot
        # break or exit this shell.
        # shellcheck disable=SC1091
        _gpushare_want=$(. /etc/default/gpushare >/dev/null 2>&1
            [ "${GPUSHARE_AUTO-}" = 1 ] && echo 1)
    fi
fi

if [ -n "$_gpushare_want" ]; then
    for _gpushare_lib in /usr/lib/x86_64-linux-gnu/libgpushare.so \
                         /usr/lib/aarch64-linux-gnu/libgpushare.so \
                         /usr/lib64/libgpushare.so \
                         /usr/lib/libgpushare.so; do
        if [ -r "$_gpushare_lib" ]; then
            case " ${LD_PRELOAD-} " in
                *" $_gpushare_lib "*|*":$_gpushare_lib "*|*" $_gpushare_lib:"*) ;;
                *) LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD }$_gpushare_lib"
                   export LD_PRELOAD ;;
            esac
            break
        fi
    done
fi

unset _gpushare_want _gpushare_conf _gpushare_lib
