"""Function words by language: what an answer's content is not, in English and the common languages a user types.

:data:`ENGLISH` is the engine's own list (function words and answer boilerplate; it was ``span.STOPWORDS``).
:data:`BY_LANGUAGE` holds the function words of French, German, Spanish, Italian, Portuguese and Dutch (articles,
pronouns, prepositions, conjunctions, the common forms of *to be* and *to have*). A word of another language's
list can be an English content word ("war", "die", "also", "come"), so :func:`stopwords_for` adds a language's
list only where the text is written in it (at least two of its function words that are not English ones);
:data:`ANY_LANGUAGE` is their union, for what may never be a name or an alternative in any language ("Le", "Der").
Pure text, no model.
"""

from __future__ import annotations

from core.engine.matching import normalize_words

_ENGLISH = """a an the is are was were be been being am of in on at to for from by with as and or but not no nor
    it its this that these those there here he she they them his her their him we you i me my our your which who
    whom whose what when where why how do does did done has have had having will would shall should can could may
    might must also than then so such very just only about into onto over under after before between during
    s t called named known one some any all most more much many yes answer answers question questions based
    according context text following given located situated belongs belong owned developed written spoken made
    born founded created produced released affiliated associated headquartered sentence complete passage full"""
ENGLISH = frozenset(_ENGLISH.split())
"""English function words and answer boilerplate (never an answer's content)."""

_LISTS = {
    "fr": """le la les l un une des du de d au aux et ou mais donc ni car que qu qui quoi dont ou est sont etait
        etaient sera ete etre a ont avait avoir ce cet cette ces c se s sa son ses leur leurs il elle ils elles
        on nous vous je j me m te tu lui y en dans sur sous par pour avec sans chez vers entre pas ne plus tres
        aussi comme quel quelle quels quelles celui celle ceux""",
    "de": """der die das den dem des ein eine einen einem einer eines und oder aber nicht kein keine ist sind war
        waren wird werden wurde wurden sein hat haben hatte hatten es er sie wir ihr ich du mich dich sich mit von
        zu zum zur im in am an auf aus bei fur nach uber unter vor durch um als wie wer was wo wann welche welcher
        welches dass auch noch nur sehr""",
    "es": """el la los las lo un una unos unas y o pero ni que quien quienes cual cuales es son era eran fue
        fueron ser estar esta estan ha han habia de del al a en con por para sin sobre entre se su sus le les me
        te nos mi tu como muy tambien mas donde cuando cuanto cuantos""",
    "it": """il lo la i gli le un uno una e ed o ma che chi cui quale quali e sono era erano fu essere ha hanno
        aveva di del della dei degli delle dello al alla ai agli alle da dal dalla in nel nella nei con su sul
        sulla per tra fra si suo sua suoi sue non piu anche come molto dove quando quanto quanti""",
    "pt": """o a os as um uma uns umas e ou mas que quem qual quais e sao era eram foi foram ser estar esta estao
        tem ter de do da dos das ao aos no na nos nas em com por para pelo pela sem sobre entre se seu sua seus
        suas lhe me te nao mais tambem como muito onde quando quanto quantos""",
    "nl": """de het een en of maar niet geen is zijn was waren wordt werd heeft hebben had van voor met op aan
        uit bij naar over onder door als hoe wie wat waar wanneer welke dat die deze ook nog""",
}
BY_LANGUAGE: dict[str, frozenset[str]] = {lang: frozenset(words.split()) for lang, words in _LISTS.items()}
"""Function words per language, in their normalized form (accents removed, as :func:`normalize_words` writes
them: "était" → "etait")."""
OPENERS = frozenset(
    """sure well certainly great hello hi indeed absolutely okay ok yes no of course bien oui non voici voila alors
    claro bueno si hola ja nein genau ecco certo sim ola both either neither each every other another bonjour
    bonsoir salut merci hallo danke buongiorno ciao grazie buenos buenas gracias obrigado obrigada thanks
    thank""".split()  # noqa: SIM905
)
"""Words a chat answer opens a sentence with ("Sure", "Bien", "Bonjour") and determiners ("both"): never a name
or an alternative."""
TITLES = frozenset(
    """mr mrs ms miss dr sir lord lady dame saint st madame monsieur mademoiselle herr frau senor senora signor
    signora professor prof king queen prince princess""".split()  # noqa: SIM905
)
"""Titles before a name ("Dr", "Sir", "Madame"): part of a name, never a name of their own."""
ANY_LANGUAGE = ENGLISH | OPENERS | TITLES | frozenset().union(*BY_LANGUAGE.values())
"""Function words of any listed language, the openers and the titles: what is never a name or a swap
alternative."""


def languages_of(text: str) -> list[str]:
    """The listed languages ``text`` is written in: those with at least two distinct function words of their own
    (not English ones) in it, most first."""
    words = set(normalize_words(text)) - ENGLISH
    hits = {lang: len(words & stop) for lang, stop in BY_LANGUAGE.items()}
    return sorted((lang for lang, n in hits.items() if n >= 2), key=lambda lang: -hits[lang])


def stopwords_for(*texts: str) -> frozenset[str]:
    """The function words of the languages ``texts`` are written in (English always)."""
    out = set(ENGLISH)
    for lang in languages_of(" ".join(texts)):
        out |= BY_LANGUAGE[lang]
    return frozenset(out)
