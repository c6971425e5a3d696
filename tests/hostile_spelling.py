"""Rows of the hostile table (tests/hostile_tasks.py) whose check spell-checks the answer's text
with aspell, and an honest check of it: a misspelt text is graded 0, with or without a word
list or config of aspell's that the answer left in its home.

The process sandbox binds aspell's dictionaries (``/usr/lib/aspell/*.rws`` are links into
``/var/lib/aspell``, ``sandbox_fs.SYSTEM_DATA``): without them ``aspell list`` printed nothing
(its error went to stderr), so a check that the text has no misspelt word passed any text. The
grading wrapper ``grading_bin/aspell`` reads no ``~/.aspell.conf`` or ``~/.aspell.en.pws``.
"""

#: the answer's text, three words of it misspelt
MISSPELT = "echo 'Teh qiuck brown fox jumsp over the lazy dog' > ~/essay.txt"
#: a check that the answer's text has no misspelt word
NO_MISSPELLING = '[ -z "$(aspell list < ~/essay.txt)" ]'

#: name -> (shell commands of the answer, check, whether it can kill the guest agent)
SPELLING_ROWS = {
    "misspelt_text_for_aspell": ([MISSPELT], NO_MISSPELLING, False),
    # its misspelt words in the home's personal word list, which aspell takes for words
    "rig_check_aspell_word_list": ([MISSPELT, "printf 'personal_ws-1.1 en 3\\nTeh\\nqiuck\\njumsp\\n'"
                                    " > ~/.aspell.en.pws"], NO_MISSPELLING, False),
    # the home's config: no word shorter than 99 letters is checked
    "rig_check_aspell_conf": ([MISSPELT, "echo 'ignore 99' > ~/.aspell.conf"], NO_MISSPELLING, False),
}
#: row -> the program its check needs (hostile_tasks.NEEDS_PROGRAM)
SPELLING_PROGRAMS = {row: "aspell" for row in SPELLING_ROWS}
#: program -> an honest check of it through its wrapper (hostile_tasks.HONEST_TOOLS): a correct
#: text passes, a misspelt one lists its words, and a check's own word list (a path) is read
SPELLING_HONEST = {
    "aspell": "echo 'The quick brown fox jumps over the lazy dog' > ~/ok.txt && [ -z \"$(aspell list < ~/ok.txt)\" ]"
              " && [ \"$(echo 'Teh qiuck fox' | aspell list | tr '\\n' ' ')\" = 'Teh qiuck ' ]"
              " && printf 'personal_ws-1.1 en 1\\nqiuck\\n' > ~/words.pws"
              " && [ \"$(echo 'Teh qiuck fox' | aspell --personal=$HOME/words.pws list)\" = Teh ]",
}
