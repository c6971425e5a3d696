# Sourced by the ImageMagick wrappers here (identify, convert, magick, compare, composite,
# mogrify, montage, stream, conjure, animate, display, import, and Debian's -im6 and -im6.q16
# names of each: the -im6.q16 ones are the real files, whose fronts /usr/bin/identify and the
# others lead to): runs the program of the wrapper's name (see ./curl) with HOME a folder
# that does not exist, so that it reads no ~/.config/ImageMagick or ~/.magick of the graded
# code's (magic.xml there made a text file ~/out.png an MVG drawing 100 wide, and
# `identify -format %w ~/out.png` said 100; delegates.xml, policy.xml, colors.xml, log.xml
# and fontconfig's files of the home are read the same way), /etc's still. Its file names
# are the shell's to expand (`~/out.png`, not '~/out.png').
. "${0%/*}/wrap.sh" && HOME=${0%/*}/no-home exec "${0##*/}" "$@"
