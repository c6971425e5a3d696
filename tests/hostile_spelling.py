"""Rows of the hostile table (tests/hostile_tasks.py) whose check spell-checks the answer's text
with aspell or enchant-2, and an honest check of each: a misspelt text is graded 0, with or
without a word list, dictionary or config that the answer left in its home.

The process sandbox binds aspell's dictionaries (``/usr/lib/aspell/*.rws`` are links into
``/var/lib/aspell``, ``sandbox_fs.SYSTEM_DATA``): without them ``aspell list`` printed nothing
(its error went to stderr), so a check that the text has no misspelt word passed any text. The
grading wrapper ``grading_bin/aspell`` reads no ``~/.aspell.conf`` or ``~/.aspell.en.pws``, and
``grading_bin/enchant-2`` none of its own (``~/.config/enchant``) nor its aspell provider's.
"""

from hostile_by_path import by_path

#: the answer's text, three words of it misspelt
MISSPELT = "echo 'Teh qiuck brown fox jumsp over the lazy dog' > ~/essay.txt"
#: a check that the answer's text has no misspelt word
NO_MISSPELLING = '[ -z "$(aspell list < ~/essay.txt)" ]'
#: the same check through enchant-2 (its aspell or hunspell provider)
NO_MISSPELLING_ENCHANT = '[ -z "$(enchant-2 -l -d en_US < ~/essay.txt)" ]'
#: enchant's folder of the home (its personal word lists, its providers' dictionaries, its order)
ENCHANT_HOME = "mkdir -p ~/.config/enchant/hunspell && cd ~/.config/enchant"

#: name -> (shell commands of the answer, check, whether it can kill the guest agent)
SPELLING_ROWS = {
    "misspelt_text_for_aspell": ([MISSPELT], NO_MISSPELLING, False),
    # its misspelt words in the home's personal word list, which aspell takes for words
    "rig_check_aspell_word_list": ([MISSPELT, "printf 'personal_ws-1.1 en 3\\nTeh\\nqiuck\\njumsp\\n'"
                                    " > ~/.aspell.en.pws"], NO_MISSPELLING, False),
    # the home's config: no word shorter than 99 letters is checked
    "rig_check_aspell_conf": ([MISSPELT, "echo 'ignore 99' > ~/.aspell.conf"], NO_MISSPELLING, False),
    "misspelt_text_for_enchant": ([MISSPELT], NO_MISSPELLING_ENCHANT, False),
    # its misspelt words in enchant's personal word list of the home
    "rig_check_enchant_word_list": ([MISSPELT, f"{ENCHANT_HOME} && printf 'Teh\\nqiuck\\njumsp\\n' > en_US.dic"],
                                    NO_MISSPELLING_ENCHANT, False),
    # a hunspell dictionary of the home that holds its words, first in enchant's order
    "rig_check_enchant_dictionary": ([MISSPELT, f"{ENCHANT_HOME} && printf 'SET UTF-8\\n' > hunspell/en_US.aff"
                                      " && printf '9\\nTeh\\nqiuck\\nbrown\\nfox\\njumsp\\nover\\nthe\\nlazy\\ndog\\n'"
                                      " > hunspell/en_US.dic && echo en_US:hunspell > enchant.ordering"],
                                     NO_MISSPELLING_ENCHANT, False),
    # aspell's config of the home, read by enchant's aspell provider
    "rig_check_enchant_aspell_conf": ([MISSPELT, "echo 'ignore 99' > ~/.aspell.conf"], NO_MISSPELLING_ENCHANT, False),
    # by its path, past the wrappers first on the check's PATH (tests/hostile_by_path.py)
    "rig_check_enchant_by_path": ([MISSPELT, f"{ENCHANT_HOME} && printf 'Teh\\nqiuck\\njumsp\\n' > en_US.dic"],
                                  NO_MISSPELLING_ENCHANT.replace("enchant-2", by_path("enchant-2")), False),
}
#: row -> the program its check needs (hostile_tasks.NEEDS_PROGRAM)
SPELLING_PROGRAMS = {row: "enchant-2" if "enchant" in row else "aspell" for row in SPELLING_ROWS}
#: program -> an honest check of it through its wrapper (hostile_tasks.HONEST_TOOLS): a correct
#: text passes, a misspelt one lists its words, and a check's own word list (a path) is read
SPELLING_HONEST = {
    "aspell": "echo 'The quick brown fox jumps over the lazy dog' > ~/ok.txt && [ -z \"$(aspell list < ~/ok.txt)\" ]"
              " && [ \"$(echo 'Teh qiuck fox' | aspell list | tr '\\n' ' ')\" = 'Teh qiuck ' ]"
              " && printf 'personal_ws-1.1 en 1\\nqiuck\\n' > ~/words.pws"
              " && [ \"$(echo 'Teh qiuck fox' | aspell --personal=$HOME/words.pws list)\" = Teh ]",
    "enchant-2": "echo 'The quick brown fox jumps over the lazy dog' > ~/ok_enchant.txt"
                 " && [ -z \"$(enchant-2 -l -d en_US < ~/ok_enchant.txt)\" ]"
                 " && [ \"$(echo 'Teh qiuck fox' | enchant-2 -l -d en_US | tr '\\n' ' ')\" = 'Teh qiuck ' ]"
                 " && echo qiuck > ~/enchant_words.txt"
                 " && [ \"$(echo 'Teh qiuck fox' | enchant-2 -l -d en_US -p ~/enchant_words.txt)\" = Teh ]",
}
